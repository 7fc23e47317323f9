// The public header from C++: self-contained, extern "C" linkage.
#include "flashsample.h"

int main()
{
    fls_params p;
    fls_params_default(&p);
    return p.draws == 1 && fls_status_string(FLS_OK) != nullptr ? 0 : 1;
}
