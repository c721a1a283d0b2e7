/* vk_device.c — the process's Vulkan instance and one context per physical device (vk_internal.h: VkDev),
 * shared by every backend on that device and kept for the life of the process: creating a device and
 * compiling pipelines is slow (lavapipe compiles each pipeline with LLVM), tests and engines make many
 * backends. Pipelines are created on first use. Also the device listing of `deltallm devices`. */
#include "backend/vulkan/vk_backend.h"
#include "backend/vulkan/vk_internal.h"

#include "gguf/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static VkInstance instance;
static VkPhysicalDevice phys[MAX_DEVICES];
static uint32_t n_phys;
static VkDev *devs[MAX_DEVICES];
static char instance_error[512];

static const char *const kernel_names[VK_KERNEL_COUNT] = {
    "eltwise", "norm", "rope", "dn_gates", "moe_route", "moe_group", "conv_silu", "dn_recurrent", "dn_chunked",
    "attention", "probe_copy", "dn_prep", "attn_prep", "attn_combine", "dn_prep_scan", "layer_norm", "rope_2d",
    "attn_full",
};
static const char *const fmt_kernel_names[VKF_COUNT] = {"mm_vec", "mm_mat", "mm_coop", "get_rows"};

/* Creates the instance and lists the devices once; false with the reason kept in instance_error. */
static bool instance_up(Err *err) {
    if (instance) return true;
    if (instance_error[0]) return err_set(err, "%s", instance_error), false;
    Err e = {{0}};
    if (!vk_load(&e)) {
        snprintf(instance_error, sizeof instance_error, "%s", e.msg);
        return err_set(err, "%s", instance_error), false;
    }
    uint32_t version = VK_API_VERSION_1_0;
    if (vkf.vkEnumerateInstanceVersion) vkf.vkEnumerateInstanceVersion(&version);
    if (version < VK_API_VERSION_1_2) {
        snprintf(instance_error, sizeof instance_error, "the Vulkan loader is version %u.%u; the backend needs 1.2",
                 VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
        return err_set(err, "%s", instance_error), false;
    }
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "deltallm",
                                   .pEngineName = "deltallm", .apiVersion = version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkInstance inst;
    VkResult r = vkf.vkCreateInstance(&ci, NULL, &inst);
    if (r != VK_SUCCESS) {
        snprintf(instance_error, sizeof instance_error, "cannot create a Vulkan instance: %s", vk_result_str(r));
        return err_set(err, "%s", instance_error), false;
    }
    vk_load_instance(inst);
    n_phys = MAX_DEVICES;
    r = vkf.vkEnumeratePhysicalDevices(inst, &n_phys, phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) n_phys = 0;
    instance = inst;
    return true;
}

int vk_dev_count(Err *err) {
    pthread_mutex_lock(&dev_lock);
    const int n = instance_up(err) ? (int)n_phys : -1;
    pthread_mutex_unlock(&dev_lock);
    return n;
}

static bool has_ext(const VkExtensionProperties *ext, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(ext[i].extensionName, name) == 0) return true;
    return false;
}

static void pick_memory(VkDev *d) {
    VkPhysicalDeviceMemoryProperties mp;
    vkf.vkGetPhysicalDeviceMemoryProperties(d->phys, &mp);
    d->mem_device = d->mem_host = UINT32_MAX;
    uint64_t best = 0;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
        const uint64_t heap = mp.memoryHeaps[mp.memoryTypes[i].heapIndex].size;
        if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && heap > best) best = heap, d->mem_device = i;
    }
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (int cached = 1; cached >= 0 && d->mem_host == UINT32_MAX; cached--)
        for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
            const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
            if ((f & hv) == hv && (!cached || (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT))) {
                d->mem_host = i;
                break;
            }
        }
    if (d->mem_device == UINT32_MAX) d->mem_device = d->mem_host;
    d->device_bytes = best;
    const VkMemoryPropertyFlags df = mp.memoryTypes[d->mem_device].propertyFlags;
    /* map device memory directly only where it is the host's own memory: on a discrete GPU a mapped
     * device-local type is a PCIe window, fast to write and very slow to read */
    d->device_is_host = (df & hv) == hv && (d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                                            d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);
}

/* Reads what the kernels need to know; fails when the device lacks something they cannot do without. */
static int probe(VkDev *d, const char **exts, uint32_t *n_exts, Err *err) {
    vkf.vkGetPhysicalDeviceProperties(d->phys, &d->props);
    snprintf(d->name, sizeof d->name, "%s", d->props.deviceName);
    d->loop_limited = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && strncmp(d->props.deviceName, "llvmpipe", 8) == 0;
    VkPhysicalDeviceSubgroupSizeControlProperties ssc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &ssc};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkf.vkGetPhysicalDeviceProperties2(d->phys, &p2);
    if (d->props.apiVersion < VK_API_VERSION_1_2)
        return err_set(err, "%s supports Vulkan %u.%u; the backend needs 1.2", d->name, VK_API_VERSION_MAJOR(d->props.apiVersion),
                       VK_API_VERSION_MINOR(d->props.apiVersion));
    const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
                                        VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    if (!(sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) || (sg.supportedOperations & need) != need)
        return err_set(err, "%s: compute shaders lack subgroup arithmetic", d->name);
    const bool v13 = d->props.apiVersion >= VK_API_VERSION_1_3;
    d->subgroup_min = d->subgroup_max = sg.subgroupSize;
    if (v13 && ssc.minSubgroupSize) d->subgroup_min = ssc.minSubgroupSize, d->subgroup_max = ssc.maxSubgroupSize;
    if (d->subgroup_min < 4 || d->subgroup_max > 128)
        return err_set(err, "%s: subgroups of %u..%u lanes are not supported", d->name, d->subgroup_min, d->subgroup_max);

    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = v13 ? &f13 : NULL};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkf.vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    if (!f12.bufferDeviceAddress) return err_set(err, "%s lacks bufferDeviceAddress", d->name);
    if (!f2.features.shaderInt64) return err_set(err, "%s lacks shaderInt64", d->name);
    d->full_subgroups = v13 && f13.computeFullSubgroups && f13.subgroupSizeControl;

    uint32_t n = 0;
    vkf.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n, NULL);
    VkExtensionProperties *ext = calloc(n ? n : 1, sizeof *ext);
    if (!ext) return err_set(err, "out of memory");
    vkf.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n, ext);
    *n_exts = 0;
    d->coopmat = false;
    if (has_ext(ext, n, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) && f12.shaderFloat16 &&
        vkf.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) {
        uint32_t nc = 0;
        vkf.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(d->phys, &nc, NULL);
        VkCooperativeMatrixPropertiesNV *cp = calloc(nc ? nc : 1, sizeof *cp);
        for (uint32_t i = 0; cp && i < nc; i++) cp[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
        if (cp) vkf.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(d->phys, &nc, cp);
        for (uint32_t i = 0; cp && i < nc; i++)
            if (cp[i].MSize == 16 && cp[i].NSize == 16 && cp[i].KSize == 16 && cp[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                cp[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV && cp[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                cp[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV && cp[i].scope == VK_SCOPE_SUBGROUP_NV)
                d->coopmat = true;
        free(cp);
        /* the kernel is written for 32-lane subgroups (NVIDIA's) */
        if (d->coopmat && d->subgroup_min == 32 && d->subgroup_max == 32) exts[(*n_exts)++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
        else d->coopmat = false;
    }
    free(ext);

    uint32_t nq = 0;
    vkf.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
    if (!qf) return err_set(err, "out of memory");
    vkf.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    d->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && d->queue_family == UINT32_MAX; i++) /* a compute queue, graphics-free if any */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) d->queue_family = i;
    for (uint32_t i = 0; i < nq && d->queue_family == UINT32_MAX; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) d->queue_family = i;
    const bool ts_bits = d->queue_family != UINT32_MAX && qf[d->queue_family].timestampValidBits >= 32;
    free(qf);
    if (d->queue_family == UINT32_MAX) return err_set(err, "%s has no compute queue", d->name);
    d->timestamps = ts_bits && d->props.limits.timestampPeriod > 0;
    d->ns_per_tick = d->props.limits.timestampPeriod;
    d->max_alloc = (uint64_t)1 << 30;
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 q2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vkf.vkGetPhysicalDeviceProperties2(d->phys, &q2);
    if (m3.maxMemoryAllocationSize) d->max_alloc = m3.maxMemoryAllocationSize;
    pick_memory(d);
    if (d->mem_host == UINT32_MAX) return err_set(err, "%s has no host-visible coherent memory", d->name);
    return 0;
}

static int spv_index(const char *name) {
    for (int i = 0; i < vk_n_spv; i++)
        if (strcmp(vk_spv[i].name, name) == 0) return i;
    return -1;
}

static int create_device(VkDev *d, Err *err) {
    const char *exts[4];
    uint32_t n_exts = 0;
    if (probe(d, exts, &n_exts, err)) return -1;
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = d->queue_family,
                                         .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
                                                        .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .pNext = d->coopmat ? &coop : NULL,
                                            .subgroupSizeControl = d->full_subgroups,
                                            .computeFullSubgroups = d->full_subgroups};
    const bool v13 = d->props.apiVersion >= VK_API_VERSION_1_3;
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = v13 ? (void *)&f13 : d->coopmat ? (void *)&coop : NULL,
                                            .bufferDeviceAddress = VK_TRUE,
                                            .shaderFloat16 = d->coopmat};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    f2.features.shaderInt64 = VK_TRUE;
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f2, .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci, .enabledExtensionCount = n_exts, .ppEnabledExtensionNames = exts};
    VkResult r = vkf.vkCreateDevice(d->phys, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) return err_set(err, "%s: cannot create the device: %s", d->name, vk_result_str(r));
    vk_load_device(d->dev);
    vkf.vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);
    const VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PUSH_BYTES};
    const VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pr};
    if (d->props.limits.maxPushConstantsSize < VK_PUSH_BYTES)
        return err_set(err, "%s: %u bytes of push constants (the kernels need %d)", d->name, d->props.limits.maxPushConstantsSize,
                       VK_PUSH_BYTES);
    r = vkf.vkCreatePipelineLayout(d->dev, &lci, NULL, &d->layout);
    if (r != VK_SUCCESS) return err_set(err, "%s: pipeline layout: %s", d->name, vk_result_str(r));
    /* which shader serves which format */
    for (int k = 0; k < VKF_COUNT; k++)
        for (int f = 0; f < 64; f++) {
            d->fmt_spv[k][f] = -1;
            const Format *fm = f < FMT_COUNT ? format_get((uint32_t)f) : NULL;
            if (!fm || !fm->weight) continue;
            char name[64];
            snprintf(name, sizeof name, "%s_%s", fmt_kernel_names[k], fm->name);
            for (int i = 0; i < vk_n_spv; i++)
                if (strcmp(vk_spv[i].name, name) == 0) d->fmt_spv[k][f] = i;
        }
    if (!d->coopmat)
        for (int f = 0; f < 64; f++) d->fmt_spv[VKF_MM_COOP][f] = -1;
    for (int fa = 0; fa < 64; fa++)
        for (int fb = 0; fb < 64; fb++) {
            d->pair_spv[fa][fb] = -1;
            const Format *ma = fa < FMT_COUNT ? format_get((uint32_t)fa) : NULL;
            const Format *mb = fb < FMT_COUNT ? format_get((uint32_t)fb) : NULL;
            if (fa == fb || !ma || !mb || !ma->weight || !mb->weight) continue;
            char name[64];
            snprintf(name, sizeof name, "mm_vec2_%s_%s", ma->name, mb->name);
            d->pair_spv[fa][fb] = (int16_t)spv_index(name);
        }
    pthread_mutex_init(&d->lock, NULL);
    return 0;
}

VkDev *vk_dev_get(int index, Err *err) {
    pthread_mutex_lock(&dev_lock);
    VkDev *d = NULL;
    if (!instance_up(err)) goto out;
    if (n_phys == 0) {
        err_set(err, "no Vulkan device (the loader found no driver: install mesa-vulkan-drivers or a GPU driver)");
        goto out;
    }
    if (index < 0 || (uint32_t)index >= n_phys) {
        err_set(err, "no Vulkan device %d (this machine has %u: vulkan:0..%u)", index, n_phys, n_phys - 1);
        goto out;
    }
    if (!devs[index]) {
        VkDev *nd = calloc(1, sizeof *nd);
        if (!nd) {
            err_set(err, "out of memory");
            goto out;
        }
        nd->index = index;
        nd->instance = instance;
        nd->phys = phys[index];
        if (create_device(nd, err)) {
            if (nd->dev) vkf.vkDestroyDevice(nd->dev, NULL);
            free(nd);
            goto out;
        }
        devs[index] = nd;
    }
    d = devs[index];
    d->refs++;
out:
    pthread_mutex_unlock(&dev_lock);
    return d;
}

/* Contexts stay for the process (their pipelines are expensive to rebuild); the count is kept for the
 * record only. */
void vk_dev_put(VkDev *d) {
    pthread_mutex_lock(&dev_lock);
    if (d) d->refs--;
    pthread_mutex_unlock(&dev_lock);
}

static VkPipeline make_pipe(VkDev *d, int spv) {
    const VkShaderModuleCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                          .codeSize = vk_spv[spv].n_words * 4, .pCode = vk_spv[spv].words};
    VkShaderModule mod;
    if (vkf.vkCreateShaderModule(d->dev, &sci, NULL, &mod) != VK_SUCCESS) return VK_NULL_HANDLE;
    const VkComputePipelineCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .flags = d->full_subgroups ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main"},
        .layout = d->layout};
    VkPipeline p = VK_NULL_HANDLE;
    if (vkf.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &pci, NULL, &p) != VK_SUCCESS) p = VK_NULL_HANDLE;
    vkf.vkDestroyShaderModule(d->dev, mod, NULL);
    return p;
}

VkPipeline vk_pipe(VkDev *d, VkKernel k) {
    VkPipeline p = d->pipes[k];
    if (p) return p;
    pthread_mutex_lock(&d->lock);
    if (!d->pipes[k]) {
        const int i = spv_index(kernel_names[k]);
        ASSERT(i >= 0); /* every kernel is built with the backend */
        d->pipes[k] = make_pipe(d, i);
    }
    p = d->pipes[k];
    pthread_mutex_unlock(&d->lock);
    return p;
}

bool vk_fmt_has(const VkDev *d, VkFmtKernel k, uint32_t fmt) { return fmt < 64 && d->fmt_spv[k][fmt] >= 0; }

VkPipeline vk_fmt_pipe(VkDev *d, VkFmtKernel k, uint32_t fmt) {
    ASSERT(vk_fmt_has(d, k, fmt));
    VkPipeline p = d->fmt_pipes[k][fmt];
    if (p) return p;
    pthread_mutex_lock(&d->lock);
    if (!d->fmt_pipes[k][fmt]) d->fmt_pipes[k][fmt] = make_pipe(d, d->fmt_spv[k][fmt]);
    p = d->fmt_pipes[k][fmt];
    pthread_mutex_unlock(&d->lock);
    return p;
}

bool vk_pair_has(const VkDev *d, uint32_t fa, uint32_t fb) { return fa < 64 && fb < 64 && d->pair_spv[fa][fb] >= 0; }

VkPipeline vk_pair_pipe(VkDev *d, uint32_t fa, uint32_t fb) {
    ASSERT(vk_pair_has(d, fa, fb));
    VkPipeline p = d->pair_pipes[fa][fb];
    if (p) return p;
    pthread_mutex_lock(&d->lock);
    if (!d->pair_pipes[fa][fb]) d->pair_pipes[fa][fb] = make_pipe(d, d->pair_spv[fa][fb]);
    p = d->pair_pipes[fa][fb];
    pthread_mutex_unlock(&d->lock);
    return p;
}

/* ---- buffers ------------------------------------------------------------------------------------------------------ */

BBuf *vk_buf_new(VkDev *d, size_t bytes, bool host, bool zero, Err *err) {
    const size_t total = ((bytes + 255) & ~(size_t)255) + 256; /* kernels may read a little past a matrix */
    if (total > d->max_alloc)
        return err_set(err, "a buffer of %zu MiB exceeds the device's largest allocation (%llu MiB)", bytes >> 20,
                       (unsigned long long)(d->max_alloc >> 20)), NULL;
    BBuf *b = calloc(1, sizeof *b);
    if (!b) return err_set(err, "out of memory"), NULL;
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = total,
                                    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                             VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT |
                                             VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkf.vkCreateBuffer(d->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        free(b);
        return err_set(err, "cannot create a buffer of %zu MiB: %s", bytes >> 20, vk_result_str(r)), NULL;
    }
    VkMemoryRequirements mr;
    vkf.vkGetBufferMemoryRequirements(d->dev, b->buf, &mr);
    const uint32_t type = host ? d->mem_host : d->mem_device;
    if (!(mr.memoryTypeBits & (1u << type))) {
        vkf.vkDestroyBuffer(d->dev, b->buf, NULL);
        free(b);
        return err_set(err, "no memory type for a buffer"), NULL;
    }
    const VkMemoryAllocateFlagsInfo fi = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                          .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &fi, .allocationSize = mr.size,
                                     .memoryTypeIndex = type};
    r = vkf.vkAllocateMemory(d->dev, &ai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        vkf.vkDestroyBuffer(d->dev, b->buf, NULL);
        free(b);
        return err_set(err, "out of %s memory for %zu MiB: %s", host ? "host-visible" : "device", bytes >> 20, vk_result_str(r)), NULL;
    }
    vkf.vkBindBufferMemory(d->dev, b->buf, b->mem, 0);
    const VkBufferDeviceAddressInfo dai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b->buf};
    b->addr = vkf.vkGetBufferDeviceAddress(d->dev, &dai);
    b->bytes = bytes;
    if (host || d->device_is_host) {
        if (vkf.vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS) b->map = NULL;
        if (host && !b->map) {
            vk_buf_free(d, b);
            return err_set(err, "cannot map host-visible memory"), NULL;
        }
    }
    if (zero && b->map) memset(b->map, 0, total);
    return b;
}

void vk_buf_free(VkDev *d, BBuf *b) {
    if (!b) return;
    if (b->map) vkf.vkUnmapMemory(d->dev, b->mem);
    vkf.vkDestroyBuffer(d->dev, b->buf, NULL);
    vkf.vkFreeMemory(d->dev, b->mem, NULL);
    free(b);
}

/* ---- listing --------------------------------------------------------------------------------------------------------- */

int vk_devices(BackendDevice *out, int cap, Err *err) {
    const int n = vk_dev_count(err);
    if (n < 0) return -1;
    for (int i = 0; i < n && i < cap; i++) {
        Err e = {{0}};
        BackendDevice *o = &out[i];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "vulkan:%d", i);
        VkDev *d = vk_dev_get(i, &e);
        if (!d) {
            snprintf(o->desc, sizeof o->desc, "unusable: %.180s", e.msg);
            continue;
        }
        static const char *const kinds[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
        const unsigned kind = d->props.deviceType <= 4 ? (unsigned)d->props.deviceType : 0;
        char sg[24];
        if (d->subgroup_max != d->subgroup_min) snprintf(sg, sizeof sg, "%u-%u", d->subgroup_min, d->subgroup_max);
        else snprintf(sg, sizeof sg, "%u", d->subgroup_min);
        snprintf(o->desc, sizeof o->desc, "%.100s (%s, Vulkan %u.%u, subgroup %s, cooperative matrix %s)", d->name, kinds[kind],
                 VK_API_VERSION_MAJOR(d->props.apiVersion), VK_API_VERSION_MINOR(d->props.apiVersion), sg,
                 d->coopmat ? "yes" : "no");
        o->memory_bytes = d->device_bytes;
        vk_dev_put(d);
    }
    return n;
}
