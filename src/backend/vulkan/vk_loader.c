/* vk_loader.c — libvulkan opened at run time, so that a binary built with the Vulkan backend still runs (on
 * the CPU) where no Vulkan loader is installed. BackendOptions.device_lib names another loader file (a machine
 * whose driver came without one: carry Debian's libvulkan1; the CLI takes it from DELTALLM_VULKAN_LIB); the first
 * load decides for the process. Entry points are resolved in three steps, as
 * the loader wants: global ones, then per instance, then per device. */
#include "backend/vulkan/vk_internal.h"
#include "backend/vulkan/vk_backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

VkFns vkf;
static PFN_vkGetInstanceProcAddr get_instance_proc;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded; /* 0 not tried, 1 ok, -1 failed */
static char load_error[300];

bool vk_load(Err *err) { return vk_backend_load(NULL, err); }

bool vk_backend_load(const char *path, Err *err) {
    pthread_mutex_lock(&load_lock);
    if (!loaded) {
        void *lib = dlopen(path && *path ? path : "libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib && !(path && *path)) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
        if (lib) get_instance_proc = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
        if (!lib || !get_instance_proc) {
            const char *e = dlerror();
            snprintf(load_error, sizeof load_error, "no Vulkan loader (%s): install libvulkan1 or name the loader (DELTALLM_VULKAN_LIB)",
                     e ? e : "libvulkan.so.1 not found");
            loaded = -1;
        } else {
#define VK_GET(name) vkf.name = (PFN_##name)get_instance_proc(NULL, #name);
            VK_GLOBAL_FNS(VK_GET)
#undef VK_GET
            loaded = vkf.vkCreateInstance ? 1 : -1;
            if (loaded < 0) snprintf(load_error, sizeof load_error, "the Vulkan loader has no vkCreateInstance");
        }
    }
    const bool ok = loaded > 0;
    pthread_mutex_unlock(&load_lock);
    if (!ok) err_set(err, "%s", load_error);
    return ok;
}

void vk_load_instance(VkInstance inst) {
#define VK_GET(name) vkf.name = (PFN_##name)get_instance_proc(inst, #name);
    VK_INSTANCE_FNS(VK_GET)
#undef VK_GET
    vkf.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)get_instance_proc(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
}

void vk_load_device(VkDevice dev) {
#define VK_GET(name) vkf.name = (PFN_##name)vkf.vkGetDeviceProcAddr(dev, #name);
    VK_DEVICE_FNS(VK_GET)
#undef VK_GET
}

const char *vk_result_str(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "success";
    case VK_NOT_READY: return "not ready";
    case VK_TIMEOUT: return "timeout";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_MEMORY_MAP_FAILED: return "memory map failed";
    case VK_ERROR_LAYER_NOT_PRESENT: return "layer not present";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "incompatible driver";
    case VK_ERROR_TOO_MANY_OBJECTS: return "too many objects";
    default: return "error";
    }
}
