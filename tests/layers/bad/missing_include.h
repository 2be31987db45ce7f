// an #include of a file that does not exist
#include "no_such_layer_api.h"
