/* Repacking of weight tensors into the interleaved layouts of quant.h
 * (done once at model load, for the SIMD kernels that read them). */
#include <string.h>

#include "quant/quant.h"

#define Q4_K_BYTES 144

int tutti_repack_type(int type) { return type == TUTTI_TYPE_Q4_K ? TUTTI_TYPE_Q4_K_X8 : -1; }

size_t tutti_repack_size(int type, int64_t n_rows, int64_t n_cols) {
    if (type != TUTTI_TYPE_Q4_K || n_rows <= 0 || n_rows % 8 || n_cols <= 0 || n_cols % TUTTI_QK_K) return 0;
    return (size_t)(n_rows / 8) * (size_t)(n_cols / TUTTI_QK_K) * sizeof(tutti_block_q4_Kx8);
}

/* The 8 6-bit scales and mins of a Q4_K super-block (ggml's get_scale_min_k4). */
static void q4k_scale_min(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 15) | ((q[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

int tutti_repack(int type, const void *src, void *dst, int64_t n_rows, int64_t n_cols) {
    if (!tutti_repack_size(type, n_rows, n_cols)) return -1;
    const int64_t nsb = n_cols / TUTTI_QK_K;
    const size_t ldw = (size_t)nsb * Q4_K_BYTES;
    tutti_block_q4_Kx8 *out = dst;
    for (int64_t p = 0; p < n_rows / 8; p++)
        for (int64_t b = 0; b < nsb; b++) {
            tutti_block_q4_Kx8 blk;
            for (int r = 0; r < 8; r++) {
                /* Q4_K block: f16 d, f16 dmin, 12 bytes of scales, 128 bytes of qs */
                const uint8_t *q = (const uint8_t *)src + (size_t)(8 * p + r) * ldw + (size_t)b * Q4_K_BYTES;
                memcpy(&blk.d[r], q, 2);
                memcpy(&blk.dmin[r], q + 2, 2);
                uint8_t sc[8], m[8];
                q4k_scale_min(q + 4, sc, m);
                for (int j = 0; j < 8; j++) {
                    blk.sc[j][r] = sc[j];
                    blk.m[j][r] = m[j];
                }
                for (int k = 0; k < 32; k++) memcpy(blk.qs[k][r], q + 16 + 4 * k, 4);
            }
            memcpy(&out[p * nsb + b], &blk, sizeof blk);
        }
    return TUTTI_TYPE_Q4_K_X8;
}
