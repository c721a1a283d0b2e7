/* version.c — dl_version(): the version of the library that is loaded (deltallm.h, DELTALLM_VERSION). */
#include "deltallm.h"

const char *dl_version(void) { return DELTALLM_VERSION; }
