/* test_devices.h — the registry's device backends that can run here, for the tests that run something on each
 * (test_device.c, test_vision_dev.c, test_server_vision.c). */
#ifndef DELTALLM_TEST_DEVICES_H
#define DELTALLM_TEST_DEVICES_H

#define TEST_MAX_DEVICES 8

/* Their names (what --device takes, device 0) into names[TEST_MAX_DEVICES]; one that cannot run makes the
 * calling test SKIP with its reason, and its name goes to *missing when asked. Returns how many. */
int test_devices(const char **names, const char **missing);

#endif
