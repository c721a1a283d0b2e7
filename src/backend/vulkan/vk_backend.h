/* vk_backend.h — the Vulkan backend's entry points for the backend registry (backend/registry.c). Built only
 * when the Makefile finds the Vulkan headers and glslc (VULKAN=1); libvulkan itself is opened at run time. */
#ifndef DL_BACKEND_VULKAN_VK_BACKEND_H
#define DL_BACKEND_VULKAN_VK_BACKEND_H

#include "backend/backend.h"

/* "vulkan" (device 0) or "vulkan:N"; fails with one line when libvulkan, the device or a feature the kernels
 * need is missing. */
Backend *vk_backend_create(const BackendOptions *o, int index, Err *err);
/* Opens the Vulkan loader once: path (BackendOptions.device_lib), or libvulkan.so.1 when NULL; the first call
 * decides. false with a line in err when it cannot. */
bool vk_backend_load(const char *path, Err *err);
/* The Vulkan devices (up to cap); returns how many, or -1 with a line in err when Vulkan cannot start. */
int vk_devices(BackendDevice *out, int cap, Err *err);

#endif
