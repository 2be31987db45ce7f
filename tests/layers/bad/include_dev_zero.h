// an #include of a device, which would never end
#include "/dev/zero"
