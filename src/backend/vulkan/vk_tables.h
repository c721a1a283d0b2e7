/* vk_tables.h — the layout of the device's table buffer (uint32 words), included by the C side
 * (vk_backend.c fills it from gguf/iq_tables.c) and by the shaders (dequant.glsl reads it). 64-bit grid
 * entries take two words, low word first. */
#ifndef DL_BACKEND_VULKAN_VK_TABLES_H
#define DL_BACKEND_VULKAN_VK_TABLES_H

#define VKT_KSIGNS 0                          /* 128 bytes: ksigns_iq2xs */
#define VKT_IQ2XXS (VKT_KSIGNS + 32)          /* 256 × u64 */
#define VKT_IQ2XS (VKT_IQ2XXS + 512)          /* 512 × u64 */
#define VKT_IQ2S (VKT_IQ2XS + 1024)           /* 1024 × u64 */
#define VKT_IQ1S (VKT_IQ2S + 2048)            /* 2048 × u64 */
#define VKT_IQ3XXS (VKT_IQ1S + 4096)          /* 256 × u32 */
#define VKT_IQ3S (VKT_IQ3XXS + 256)           /* 512 × u32 */
#define VKT_KV_IQ4NL (VKT_IQ3S + 512)         /* 16 × int32 */
#define VKT_KV_MXFP4 (VKT_KV_IQ4NL + 16)      /* 16 × int32 */
#define VKT_WORDS (VKT_KV_MXFP4 + 16)

#endif
