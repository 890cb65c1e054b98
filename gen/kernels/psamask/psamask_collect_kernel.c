/* psamask's COLLECT (psa_type 0) as a compiled loop: the block copies gen/kernels/psamask/reference.py does with numpy,
 * per position (h, w) one row segment at a time.  Only values move (memcpy of elem bytes each), so the
 * result is the numpy path's bit for bit whatever the dtype.
 *
 * forward:  y[n, h, w, fh*W + fw] = x[n, h, w, hidx*wm + widx]    for (fh, fw) = (h + hidx - half_h,
 * backward: dx[n, h, w, hidx*wm + widx] = dy[n, h, w, fh*W + fw]   w + widx - half_w) inside the map;
 * the caller zeroes the target, whose other elements stay 0.
 */
#include <string.h>

void psamask_collect(const char *source, char *target, long N, long H, long W, long hm, long wm, long elem,
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
}
