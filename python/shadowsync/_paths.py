# Where libshadowsync lies relative to this package once installed under one
# prefix. cmake --install writes the real value (python/CMakeLists.txt);
# this default is the one for a prefix with lib/ and lib/python3.X/.
LIBRARY_FROM_PACKAGE = "../../../libshadowsync.so.0"
