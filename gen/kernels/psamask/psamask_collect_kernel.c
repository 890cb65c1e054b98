/* psamask's COLLECT (psa_type 0) as a compiled loop: the block copies gen/kernels/psamask/reference.py does with numpy,
 * per position (h, w) one row segment at a time.  Only values move (memcpy of elem bytes each), so the
 * result is the numpy path's bit for bit whatever the dtype.
 *
 * forward:  y[n, h, w, fh*W + fw] = x[n, h, w, hidx*wm + widx]    for (fh, fw) = (h + hidx - half_h,
 * backward: dx[n, h, w, hidx*wm + widx] = dy[n, h, w, fh*W + fw]   w + widx - half_w) inside the map;
 * the caller zeroes the target, whose other elements stay 0.  Returns 1 (done), as psamask_distribute does.
 */
#include <stdlib.h>
#include <string.h>

int psamask_collect(const char *source, char *target, long N, long H, long W, long hm, long wm, long elem,
                    int backward)
{
    const long half_h = (hm - 1) / 2, half_w = (wm - 1) / 2;
    const long mask = hm * wm, map = H * W;
    for (long n = 0; n < N; n++) {
        for (long h = 0; h < H; h++) {
            const long row_lo = half_h - h > 0 ? half_h - h : 0;
            const long row_hi = hm < H + half_h - h ? hm : H + half_h - h;
            for (long w = 0; w < W; w++) {
                const long col_lo = half_w - w > 0 ? half_w - w : 0;
                const long col_hi = wm < W + half_w - w ? wm : W + half_w - w;
                if (col_lo >= col_hi)
                    continue;
                const long position = (n * H + h) * W + w;
                const size_t bytes = (size_t)(col_hi - col_lo) * (size_t)elem;
                for (long r = row_lo; r < row_hi; r++) {
                    const long masked = position * mask + r * wm + col_lo;
                    const long mapped = position * map + (h + r - half_h) * W + (w + col_lo - half_w);
                    if (backward)
                        memcpy(target + masked * elem, source + mapped * elem, bytes);
                    else
                        memcpy(target + mapped * elem, source + masked * elem, bytes);
                }
            }
        }
    }
    return 1;
}

/* DISTRIBUTE (psa_type 1), the transpose of COLLECT's map:
 *
 * forward:  y[n, fh, fw, h*W + w] = x[n, h, w, hidx*wm + widx]
 * backward: dx[n, h, w, hidx*wm + widx] = dy[n, fh, fw, h*W + w]
 *
 * for (fh, fw) = (h + hidx - half_h, w + widx - half_w) inside the map; the caller zeroes the target.  One
 * copy of the loop per element size, so that an element moves as one load and store; 0 where malloc
 * fails (the caller's numpy path then runs).
 */
#define PSAMASK_DISTRIBUTE(NAME, T)                                                                          \
    static int NAME(const T *source, T *target, long N, long H, long W, long hm, long wm, int backward)     \
    {                                                                                                        \
        const long half_h = (hm - 1) / 2, half_w = (wm - 1) / 2;                                             \
        const long mask = hm * wm, map = H * W;                                                              \
        /* One position row h at a time, through a scratch[w][fh*W + fw] of row h's positions' windows laid   \
         * out on the map: forward fills it from each position's mask rows (contiguous runs) and writes it out \
         * transposed, the W elements of each map cell's y row that belong to row h (whole cache lines);     \
         * backward reads those W elements of every cell's dy row into it and cuts each position's mask rows \
         * out.  Moved one element at a time instead, y's and dy's rows of H*W elements stride a power of two  \
         * apart on the usual maps, and every access misses the cache (measured: 2.5x slower at cityscapes'  \
         * map).  The scratch's rows are padded off that power of two for the same reason. */               \
        const long stride = map + 16;                                                                        \
        T *scratch = (T *)malloc(sizeof(T) * (size_t)stride * (size_t)W);                                    \
        if (scratch == NULL)                                                                                  \
            return 0;                                                                                        \
        for (long n = 0; n < N; n++)                                                                         \
            for (long h = 0; h < H; h++) {                                                                   \
                const long r_lo = half_h - h > 0 ? half_h - h : 0;                                           \
                const long r_hi = hm < H + half_h - h ? hm : H + half_h - h;                                 \
                if (r_lo >= r_hi)                                                                            \
                    continue;                                                                                \
                const long fh_lo = h + r_lo - half_h, fh_hi = h + r_hi - half_h;                             \
                T *rows = target + ((n * H + h) * W) * mask;                                                 \
                const T *masks = source + ((n * H + h) * W) * mask;                                          \
                if (!backward)                                                                               \
                    for (long w = 0; w < W; w++)                                                             \
                        memset(scratch + w * stride + fh_lo * W, 0, sizeof(T) * (size_t)((fh_hi - fh_lo) * W)); \
                else                                                                                         \
                    for (long cell = fh_lo * W; cell < fh_hi * W; cell++) {                                  \
                        const T *line = source + (n * map + cell) * map + h * W;                             \
                        for (long w = 0; w < W; w++)                                                         \
                            scratch[w * stride + cell] = line[w];                                            \
                    }                                                                                        \
                for (long w = 0; w < W; w++) {                                                               \
                    const long c_lo = half_w - w > 0 ? half_w - w : 0;                                       \
                    const long c_hi = wm < W + half_w - w ? wm : W + half_w - w;                             \
                    if (c_lo >= c_hi)                                                                        \
                        continue;                                                                            \
                    for (long r = r_lo; r < r_hi; r++) {                                                     \
                        T *on_map = scratch + w * stride + (h + r - half_h) * W + w + c_lo - half_w;         \
                        const size_t bytes = sizeof(T) * (size_t)(c_hi - c_lo);                              \
                        if (backward)                                                                        \
                            memcpy(rows + w * mask + r * wm + c_lo, on_map, bytes);                          \
                        else                                                                                 \
                            memcpy(on_map, masks + w * mask + r * wm + c_lo, bytes);                         \
                    }                                                                                        \
                }                                                                                            \
                if (!backward)                                                                               \
                    for (long cell = fh_lo * W; cell < fh_hi * W; cell++) {                                  \
                        T *line = target + (n * map + cell) * map + h * W;                                   \
                        for (long w = 0; w < W; w++)                                                         \
                            line[w] = scratch[w * stride + cell];                                            \
                    }                                                                                        \
            }                                                                                                \
        free(scratch);                                                                                       \
        return 1;                                                                                            \
    }

PSAMASK_DISTRIBUTE(distribute_2, unsigned short)
PSAMASK_DISTRIBUTE(distribute_4, unsigned int)
PSAMASK_DISTRIBUTE(distribute_8, unsigned long long)

/* 0 when elem is no size the loop has a copy for (the caller's numpy path then runs). */
int psamask_distribute(const char *source, char *target, long N, long H, long W, long hm, long wm, long elem,
                       int backward)
{
    switch (elem) {
    case 2: return distribute_2((const unsigned short *)source, (unsigned short *)target, N, H, W, hm, wm, backward);
    case 4: return distribute_4((const unsigned int *)source, (unsigned int *)target, N, H, W, hm, wm, backward);
    case 8: return distribute_8((const unsigned long long *)source, (unsigned long long *)target, N, H, W, hm, wm, backward);
    }
    return 0;
}
