/* mmcv 2.2.0's deform_roi_pool_backward_cuda_kernel and deform_roi_pool_forward_cuda_kernel in T (float or
 * at::Half) as compiled loops, bit for bit what gen/kernels/deform_roi_pool/mmcv_emulation_backward.py and
 * mmcv_emulation.py compute with numpy (the baseline `opcase gen` computes beside the golden for dynamic
 * thresholds); the forward's order is its own (deform_roi_pool_forward_mmcv below).
 *
 * Values are float32 here whatever T is (../shared/mmcv_half.h: an at::Half operator is the float32
 * operation rounded to half).  Every operation of the numpy code, in its order and with its fusions:
 * `mmcv_mac(acc, a, b)` is ScalarT.mac (fmaf(a, b, acc) for float; two roundings, nothing fused, for half),
 * `in_t` one operator's rounding to T.  The atomicAdds go in the emulation's order: block after block of
 * 512 threads; within a block sample step after step ((iy, ix) in row-major order), then corner (w1..w4),
 * then lane; or, thread_by_thread, thread after thread, each thread's steps and corners in turn.  Each add
 * is rounded to T, as np.add.at in T.  NaN bits are left to the caller's canonical NaN (ScalarT.result);
 * a NaN never decides anything here that numpy decides otherwise (comparisons and to_int treat it alike).
 */
#include <stdlib.h>

#include "../shared/mmcv_half.h"

#define BLOCK 512                           /* THREADS_PER_BLOCK of mmcv's pytorch_cuda_helper.hpp */

/* The statuses besides 0 (done): numpy must run (and raise or decide). */
#define NUMPY_DECIDES 1

typedef struct {                /* a roi's preamble in T (mmcv_emulation_backward._Geometry) */
    float start_w, start_h, roi_w, roi_h, bin_w, bin_h, gamma_roi_w, gamma_roi_h, count;
    long grid_h, grid_w, batch;
} Roi;

typedef struct {                /* one thread's sample at one step (mmcv_emulation_backward._Chunk.samples) */
    int used;
    long spatial[4];            /* (batch * H + row) * W + col of each corner */
    float weight[4], along_y_factor[4], along_x_factor[4];
} Sample;

typedef struct {                /* what a thread reads once: its bin and its gradient */
    long n, c, ph, pw;
    float g, y0, x0;
} Thread;

/* Each roi's preamble in T, as the numpy emulations' (mmcv_emulation._pool, mmcv_emulation_backward._Geometry)
 * from rois [R, 5] (float32 carriers) and the launcher's params (cast to T here: they are float32 values,
 * mmcv_emulation.as_t).  count is grid_h * grid_w, at least 1 where at_least_one (the forward's
 * max(.., 1); the backward has none).  Returns 0 for a batch index outside [0, N): numpy raises. */
static int preamble(const float *rois, long R, long N, long PH, long PW, double spatial_scale, double gamma_value,
                    long sampling_ratio, int at_least_one, int is_half, Roi *geo)
{
    const float scale = mmcv_in_t((float)spatial_scale, is_half), gamma = mmcv_in_t((float)gamma_value, is_half);
    const float minus_half = -0.5f;
    const float t_ph = mmcv_int_in_t(PH, is_half), t_pw = mmcv_int_in_t(PW, is_half);
    for (long r = 0; r < R; r++) {
        const float *box = rois + 5 * r;
        Roi *g = geo + r;
        g->batch = mmcv_to_int(box[0]);
        if (g->batch < 0 || g->batch >= N)
            return 0;
        g->start_w = mmcv_mac(minus_half, box[1], scale, is_half);
        g->start_h = mmcv_mac(minus_half, box[2], scale, is_half);
        g->roi_w = mmcv_in_t(mmcv_mac(minus_half, box[3], scale, is_half) - g->start_w, is_half);
        g->roi_h = mmcv_in_t(mmcv_mac(minus_half, box[4], scale, is_half) - g->start_h, is_half);
        g->bin_h = mmcv_in_t(g->roi_h / t_ph, is_half);
        g->bin_w = mmcv_in_t(g->roi_w / t_pw, is_half);
        if (sampling_ratio > 0) {
            g->grid_h = g->grid_w = sampling_ratio;
        } else {
            g->grid_h = mmcv_to_int(ceilf(g->bin_h));
            g->grid_w = mmcv_to_int(ceilf(g->bin_w));
        }
        const long samples = g->grid_h * g->grid_w;
        g->count = mmcv_int_in_t(at_least_one && samples < 1 ? 1 : samples, is_half);
        g->gamma_roi_w = mmcv_in_t(gamma * g->roi_w, is_half);
        g->gamma_roi_h = mmcv_in_t(gamma * g->roi_h, is_half);
    }
    return 1;
}

MMCV_INLINE void sample(const Roi *roi, const Thread *t, long iy, long ix, long H, long W, int with_offset,
                        int is_half, Sample *s)
{
    s->used = 0;
    if (iy >= roi->grid_h || ix >= roi->grid_w)
        return;
    const float step_y = mmcv_in_t(mmcv_in_t(mmcv_in_t((float)((double)iy + 0.5), is_half) * roi->bin_h, is_half)
                                   / mmcv_int_in_t(roi->grid_h, is_half), is_half);
    const float step_x = mmcv_in_t(mmcv_in_t(mmcv_in_t((float)((double)ix + 0.5), is_half) * roi->bin_w, is_half)
                                   / mmcv_int_in_t(roi->grid_w, is_half), is_half);
    const float y = mmcv_in_t(t->y0 + step_y, is_half), x = mmcv_in_t(t->x0 + step_x, is_half);
    MmcvBilinear b;
    if (!mmcv_bilinear(y, x, H, W, is_half, &b))
        return;
    const long y_low = b.y_low, y_high = b.y_high, x_low = b.x_low, x_high = b.x_high;
    s->used = 1;
    for (int k = 0; k < 4; k++)
        s->weight[k] = b.weight[k];
    const long image = roi->batch * H;
    s->spatial[0] = (image + y_low) * W + x_low;
    s->spatial[1] = (image + y_low) * W + x_high;
    s->spatial[2] = (image + y_high) * W + x_low;
    s->spatial[3] = (image + y_high) * W + x_high;
    if (!with_offset)
        return;
    const float yl = mmcv_int_in_t(y_low, is_half), yh = mmcv_int_in_t(y_high, is_half);
    const float xl = mmcv_int_in_t(x_low, is_half), xh = mmcv_int_in_t(x_high, is_half);
    s->along_x_factor[0] = mmcv_in_t(y - yl, is_half);
    s->along_x_factor[1] = mmcv_in_t(yh - y, is_half);
    s->along_x_factor[2] = mmcv_in_t(yl - y, is_half);
    s->along_x_factor[3] = mmcv_in_t(y - yh, is_half);
    s->along_y_factor[0] = mmcv_in_t(x - xl, is_half);
    s->along_y_factor[1] = mmcv_in_t(xh - x, is_half);
    s->along_y_factor[2] = mmcv_in_t(xl - x, is_half);
    s->along_y_factor[3] = mmcv_in_t(x - xh, is_half);
}

/* mmcv_emulation_backward._four_terms: p[a]*f0, then the other three fused (ScalarT.mac) in turn. */
MMCV_INLINE float four_terms(const float *pixel, const float *factor, int a, int b, int c, int d, int is_half)
{
    float total = mmcv_in_t(pixel[a] * factor[0], is_half);
    total = mmcv_mac(total, pixel[b], factor[1], is_half);
    total = mmcv_mac(total, pixel[c], factor[2], is_half);
    return mmcv_mac(total, pixel[d], factor[3], is_half);
}

/* The grad_offset values of a used sample: (gamma * roi_width) * g * along_x, and along y. */
MMCV_INLINE void offset_values(const Roi *roi, const Thread *t, const Sample *s, const void *features, long C,
                               int is_half, float *ogx, float *ogy)
{
    float pixel[4];
    for (int k = 0; k < 4; k++)
        pixel[k] = mmcv_value_of(features, s->spatial[k] * C + t->c, is_half);
    const float along_x = four_terms(pixel, s->along_x_factor, 3, 1, 2, 0, is_half);
    const float along_y = four_terms(pixel, s->along_y_factor, 3, 2, 1, 0, is_half);
    *ogx = mmcv_in_t(mmcv_in_t(roi->gamma_roi_w * t->g, is_half) * along_x, is_half);
    *ogy = mmcv_in_t(mmcv_in_t(roi->gamma_roi_h * t->g, is_half) * along_y, is_half);
}

/* The largest grid's steps over rois first..last (those with samples): a block's sample steps. */
static void block_steps(const Roi *geo, long first, long last, long *steps_h, long *steps_w)
{
    *steps_h = *steps_w = 0;
    for (long r = first; r <= last; r++)
        if (geo[r].grid_h > 0 && geo[r].grid_w > 0) {
            *steps_h = geo[r].grid_h > *steps_h ? geo[r].grid_h : *steps_h;
            *steps_w = geo[r].grid_w > *steps_w ? geo[r].grid_w : *steps_w;
        }
}

/* grad_output [R, PH, PW, C] and features [N, H, W, C] in T (float, or float16 bits where is_half), rois
 * [R, 5] and offset [R, 2, PH, PW] (or NULL) float32 carriers; spatial_scale and gamma as the launcher gets
 * them (cast to T here) -> grad_input_out [N, H, W, C], grad_offset_out [R, 2, PH, PW] in T, NaNs canonical.
 * Returns NUMPY_DECIDES (the outputs unwritten) for a batch index outside [0, N), more sample slots than
 * max_slots, or no memory. */
int deform_roi_pool_backward_mmcv(const void *grad_output, const void *features, long N, long H, long W, long C,
                                  const float *rois, long R, const float *offset, long PH, long PW,
                                  double spatial_scale, double gamma_value, long sampling_ratio, int is_half,
                                  int thread_by_thread, double max_slots, void *grad_input_out,
                                  void *grad_offset_out)
{
    const long input_size = N * H * W * C, offset_size = R * 2 * PH * PW;
    float *grad_input = calloc(input_size > 0 ? input_size : 1, sizeof(float));
    float *grad_offset = calloc(offset_size > 0 ? offset_size : 1, sizeof(float));
    Roi *geo = malloc(sizeof(Roi) * (R > 0 ? R : 1));
    Thread *lanes = malloc(sizeof(Thread) * BLOCK);
    Sample *samples = malloc(sizeof(Sample) * BLOCK);
    int status = 0;
    if (!grad_input || !grad_offset || !geo || !lanes || !samples) {
        status = NUMPY_DECIDES;
        goto done;
    }
    if (R == 0 || PH == 0 || PW == 0 || C == 0 || H == 0 || W == 0)
        goto written;
    if (!preamble(rois, R, N, PH, PW, spatial_scale, gamma_value, sampling_ratio, 0, is_half, geo)) {
        status = NUMPY_DECIDES;
        goto done;
    }
    double slots = 0;
    const long threads = R * C * PH * PW, bins = PH * PW;
    /* The slots the block loop visits, (its largest grid's steps) x lanes per block, as numpy's arrays
     * hold them: past max_slots numpy decides (its arrays would not fit), rather than a loop that runs for hours. */
    for (long first = 0; first < threads; first += BLOCK) {
        long steps_h, steps_w;
        block_steps(geo, first / (bins * C), (first + BLOCK - 1 < threads ? first + BLOCK - 1 : threads - 1) / (bins * C),
                    &steps_h, &steps_w);
        slots += (double)steps_h * (double)steps_w * BLOCK;
    }
    if (slots > max_slots) {
        status = NUMPY_DECIDES;
        goto done;
    }
    const int with_offset = offset != NULL;
    for (long first = 0; first < threads; first += BLOCK) {
        const long lanes_here = threads - first < BLOCK ? threads - first : BLOCK;
        long steps_h, steps_w;
        block_steps(geo, first / (bins * C), (first + lanes_here - 1) / (bins * C), &steps_h, &steps_w);
        for (long lane = 0; lane < lanes_here; lane++) {
            const long thread = first + lane;
            Thread *t = lanes + lane;
            t->pw = thread % PW;
            t->ph = (thread / PW) % PH;
            t->c = (thread / bins) % C;
            t->n = thread / (bins * C);
            const Roi *roi = geo + t->n;
            t->g = mmcv_in_t(mmcv_value_of(grad_output, ((t->n * PH + t->ph) * PW + t->pw) * C + t->c, is_half)
                             / roi->count, is_half);
            float start_w = roi->start_w, start_h = roi->start_h;
            if (with_offset) {
                const float *shift = offset + t->n * 2 * bins + t->ph * PW + t->pw;
                start_w = mmcv_mac(start_w, roi->gamma_roi_w, shift[0], is_half);
                start_h = mmcv_mac(start_h, roi->gamma_roi_h, shift[bins], is_half);
            }
            t->y0 = mmcv_mac(start_h, mmcv_int_in_t(t->ph, is_half), roi->bin_h, is_half);
            t->x0 = mmcv_mac(start_w, mmcv_int_in_t(t->pw, is_half), roi->bin_w, is_half);
        }
        if (thread_by_thread) {
            for (long lane = 0; lane < lanes_here; lane++) {
                const Thread *t = lanes + lane;
                const Roi *roi = geo + t->n;
                for (long iy = 0; iy < roi->grid_h && roi->grid_w > 0; iy++)
                    for (long ix = 0; ix < roi->grid_w; ix++) {
                        Sample s = {0};
                        sample(roi, t, iy, ix, H, W, with_offset, is_half, &s);
                        if (!s.used)
                            continue;
                        for (int k = 0; k < 4; k++)
                            mmcv_atomic_add(grad_input + s.spatial[k] * C + t->c, mmcv_in_t(t->g * s.weight[k], is_half), is_half);
                        if (with_offset) {
                            float ogx, ogy;
                            offset_values(roi, t, &s, features, C, is_half, &ogx, &ogy);
                            float *target = grad_offset + t->n * 2 * bins + t->ph * PW + t->pw;
                            mmcv_atomic_add(target, ogx, is_half);
                            mmcv_atomic_add(target + bins, ogy, is_half);
                        }
                    }
            }
            continue;
        }
        for (long iy = 0; iy < steps_h; iy++)
            for (long ix = 0; ix < steps_w; ix++) {
                for (long lane = 0; lane < lanes_here; lane++) {
                    /* A lane bins lanes before it has the same bin (the channel before): the same sample. */
                    if (lane >= bins && lanes[lane - bins].n == lanes[lane].n)
                        samples[lane] = samples[lane - bins];
                    else
                        sample(geo + lanes[lane].n, lanes + lane, iy, ix, H, W, with_offset, is_half, samples + lane);
                }
                for (int k = 0; k < 4; k++)
                    for (long lane = 0; lane < lanes_here; lane++) {
                        const Sample *s = samples + lane;
                        if (s->used)
                            mmcv_atomic_add(grad_input + s->spatial[k] * C + lanes[lane].c,
                                mmcv_in_t(lanes[lane].g * s->weight[k], is_half), is_half);
                    }
                if (!with_offset)
                    continue;
                for (long lane = 0; lane < lanes_here; lane++) {
                    const Sample *s = samples + lane;
                    if (!s->used)
                        continue;
                    const Thread *t = lanes + lane;
                    float ogx, ogy;
                    offset_values(geo + t->n, t, s, features, C, is_half, &ogx, &ogy);
                    float *target = grad_offset + t->n * 2 * bins + t->ph * PW + t->pw;
                    mmcv_atomic_add(target, ogx, is_half);
                    mmcv_atomic_add(target + bins, ogy, is_half);
                }
            }
    }
written:
    mmcv_write_result(grad_input, input_size, is_half, grad_input_out);
    mmcv_write_result(grad_offset, offset_size, is_half, grad_offset_out);
done:
    free(grad_input);
    free(grad_offset);
    free(geo);
    free(lanes);
    free(samples);
    return status;
}

/* The forward's statuses besides 0 and NUMPY_DECIDES: a bin of more samples than numpy's emulation takes. */
#define STEPS_OVER 2

/* mmcv_emulation._pool's refusal (check_emulated_steps), chunk by chunk of chunk_rois rois as numpy pools
 * them: the largest grid_h times the largest grid_w of a chunk (0 for negative grids), over max_steps.
 * Returns the first such product in chunk order (what numpy raises about), or -1 where there is none. */
static double steps_over(const Roi *geo, long R, long chunk_rois, double max_steps)
{
    for (long first = 0; first < R; first += chunk_rois) {
        long steps_h = 0, steps_w = 0;
        for (long r = first; r < R && r < first + chunk_rois; r++) {
            steps_h = geo[r].grid_h > steps_h ? geo[r].grid_h : steps_h;
            steps_w = geo[r].grid_w > steps_w ? geo[r].grid_w : steps_w;
        }
        const double steps = (double)steps_h * (double)steps_w;
        if (!(steps <= max_steps))
            return steps;
    }
    return -1;
}

/* Set to 1 (from Python, by ctypes) to run the forward's baseline x86-64 build on any CPU: the tests check its bits too. */
int deform_roi_pool_mmcv_generic_only = 0;

#define CHUNK 16                   /* channels per vectorized step (GCC's -O2 vectorizes loops without remainder) */

typedef struct {                   /* the forward's arrays and shapes */
    const void *features;          /* [N, H, W, C] in T */
    const float *offset;           /* [R, 2, PH, PW] or NULL */
    long H, W, C, R, PH, PW;
} Forward;

/* total[c] += the sample of corner rows v[0..3] (float32) with weights w, c < n: mmcv_emulation._sample (w1 * v1
 * rounded, then the other three corners by ScalarT.mac), then ScalarT.add. */
MMCV_INLINE void add_sample(float *restrict total, const float *restrict v0, const float *restrict v1,
                            const float *restrict v2, const float *restrict v3_, const float *w, long n,
                            const int is_half)
{
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
    long c = 0;
#define ADD_SAMPLE(i) do { \
        float value = mmcv_in_t(w0 * v0[i], is_half); \
        value = mmcv_mac(value, w1, v1[i], is_half); \
        value = mmcv_mac(value, w2, v2[i], is_half); \
        value = mmcv_mac(value, w3, v3_[i], is_half); \
        total[i] = mmcv_in_t(total[i] + value, is_half); \
    } while (0)
    for (; c + CHUNK <= n; c += CHUNK)
        for (int l = 0; l < CHUNK; l++)
            ADD_SAMPLE(c + l);
    for (; c < n; c++)
        ADD_SAMPLE(c);
#undef ADD_SAMPLE
}

/* n float16 bits as float32, mmcv_half_to_float's bits (NaN payloads too), in a form GCC vectorizes (the
 * scalar conversion's branches were most of a half call): the bits below the sign moved into float32's
 * place and scaled by 2^112, exact for normal and subnormal halves alike (float32 subnormals are exact
 * without fast-math); inf and NaN rebuilt; the sign copied.  tests/test_compiled_mmcv.py checks all 2^16. */
MMCV_INLINE float half_value(uint32_t h)
{
    const uint32_t magnitude = (h & 0x7FFFu) << 13;
    const uint32_t finite = mmcv_bits_of(mmcv_float_of(magnitude) * 0x1p112f);
    /* All ones where the exponent is 31 (inf, NaN), by arithmetic: GCC's -O2 vectorizer takes no branch. */
    const uint32_t special = 0u - (((h & 0x7C00u) + 0x0400u) >> 15);
    const uint32_t u = (finite & ~special) | ((magnitude | 0x7F800000u) & special);
    return mmcv_float_of(u | ((h & 0x8000u) << 16));
}

MMCV_INLINE void half_row(const uint16_t *restrict bits, long n, float *restrict out)
{
    long c = 0;
    for (; c + CHUNK <= n; c += CHUNK)
        for (int l = 0; l < CHUNK; l++)
            out[c + l] = half_value(bits[c + l]);
    for (; c < n; c++)
        out[c] = half_value(bits[c]);
}

static void half_row_generic(const uint16_t *bits, long n, float *out) { half_row(bits, n, out); }
MMCV_V3 static void half_row_v3(const uint16_t *bits, long n, float *out) { half_row(bits, n, out); }

/* half_row of the build the forward runs, for the tests. */
void deform_roi_pool_mmcv_half_row(const uint16_t *bits, long n, float *out)
{
    (mmcv_v3(deform_roi_pool_mmcv_generic_only) ? half_row_v3 : half_row_generic)(bits, n, out);
}

/* One bin's sums [C] (mmcv_emulation._pool's total[r, ph, pw]): its samples in (iy, ix) order, each added
 * to every channel's sum with one rounding to T.  A sample outside the map adds 0, as numpy's np.where
 * makes it (the same as adding nothing, since a sum of halves from +0 is never -0, but numpy's operation).
 * Half rows are read into rows (4 C floats). */
MMCV_INLINE void bin_sums(const Forward *f, const Roi *roi, float y0, float x0, const int is_half, float *rows,
                          float *total)
{
    const long H = f->H, W = f->W, C = f->C;
    for (long c = 0; c < C; c++)
        total[c] = 0.0f;
    for (long iy = 0; iy < roi->grid_h; iy++) {
        const float step_y = mmcv_in_t(mmcv_in_t(mmcv_in_t((float)((double)iy + 0.5), is_half) * roi->bin_h, is_half)
                                       / mmcv_int_in_t(roi->grid_h, is_half), is_half);
        const float y = mmcv_in_t(y0 + step_y, is_half);
        for (long ix = 0; ix < roi->grid_w; ix++) {
            const float step_x = mmcv_in_t(mmcv_in_t(mmcv_in_t((float)((double)ix + 0.5), is_half) * roi->bin_w,
                                                     is_half) / mmcv_int_in_t(roi->grid_w, is_half), is_half);
            const float x = mmcv_in_t(x0 + step_x, is_half);
            MmcvBilinear b;
            if (!mmcv_bilinear(y, x, H, W, is_half, &b)) {
                for (long c = 0; c < C; c++)
                    total[c] = mmcv_in_t(total[c] + 0.0f, is_half);
                continue;
            }
            const long image = roi->batch * H;
            const long corner[4] = {((image + b.y_low) * W + b.x_low) * C, ((image + b.y_low) * W + b.x_high) * C,
                                    ((image + b.y_high) * W + b.x_low) * C, ((image + b.y_high) * W + b.x_high) * C};
            const float *v[4];
            for (int k = 0; k < 4; k++) {
                if (is_half) {
                    half_row((const uint16_t *)f->features + corner[k], C, rows + k * C);
                    v[k] = rows + k * C;
                } else {
                    v[k] = (const float *)f->features + corner[k];
                }
            }
            add_sample(total, v[0], v[1], v[2], v[3], b.weight, C, is_half);
        }
    }
}

/* Every output element of the rois geo [R]: out [R, PH, PW, C] in T, NaNs canonical. */
MMCV_INLINE void forward_body(const Forward *f, const Roi *geo, const int is_half, float *rows, float *total, void *out)
{
    const long PH = f->PH, PW = f->PW, C = f->C, bins = PH * PW;
    for (long r = 0; r < f->R; r++) {
        const Roi *roi = geo + r;
        for (long ph = 0; ph < PH; ph++)
            for (long pw = 0; pw < PW; pw++) {
                float start_w = roi->start_w, start_h = roi->start_h;
                if (f->offset != NULL) {
                    const float *shift = f->offset + r * 2 * bins + ph * PW + pw;
                    start_w = mmcv_mac(start_w, roi->gamma_roi_w, shift[0], is_half);
                    start_h = mmcv_mac(start_h, roi->gamma_roi_h, shift[bins], is_half);
                }
                const float y0 = mmcv_mac(start_h, mmcv_int_in_t(ph, is_half), roi->bin_h, is_half);
                const float x0 = mmcv_mac(start_w, mmcv_int_in_t(pw, is_half), roi->bin_w, is_half);
                bin_sums(f, roi, y0, x0, is_half, rows, total);
                const long base = ((r * PH + ph) * PW + pw) * C;
                for (long c = 0; c < C; c++) {
                    const float value = mmcv_in_t(total[c] / roi->count, is_half);
                    if (is_half)
                        ((uint16_t *)out)[base + c] = mmcv_half_bits(value);
                    else
                        ((float *)out)[base + c] = mmcv_canonical_float(value);
                }
            }
    }
}

/* Built twice: for x86-64-v3 (AVX2 and FMA: fmaf is one instruction), run where the CPU has it, and for the
 * baseline (fmaf a libm call); the same operations either way, so the same bits. */
#define FORWARD_ARGS const Forward *f, const Roi *geo, int is_half, float *rows, float *total, void *out
static void forward_generic(FORWARD_ARGS) { is_half ? forward_body(f, geo, 1, rows, total, out)
                                                    : forward_body(f, geo, 0, rows, total, out); }
MMCV_V3 static void forward_v3(FORWARD_ARGS) { is_half ? forward_body(f, geo, 1, rows, total, out)
                                                  : forward_body(f, geo, 0, rows, total, out); }

/* deform_roi_pool_forward_cuda_kernel as mmcv_emulation.deform_roi_pool_forward computes it: features
 * [N, H, W, C] in T (float, or float16 bits where is_half), rois [R, 5] and offset [R, 2, PH, PW] (or NULL)
 * float32 carriers -> out [R, PH, PW, C] in T, NaNs canonical (ScalarT.result).  chunk_rois and max_steps:
 * numpy's chunks of rois and its MAX_EMULATED_STEPS, for its refusal (*refused_steps and STEPS_OVER, nothing
 * written).  Returns NUMPY_DECIDES (nothing written) for a batch index outside [0, N) or no memory. */
int deform_roi_pool_forward_mmcv(const void *features, long N, long H, long W, long C, const float *rois, long R,
                                 const float *offset, long PH, long PW, double spatial_scale, double gamma_value,
                                 long sampling_ratio, int is_half, long chunk_rois, double max_steps,
                                 double *refused_steps, void *out)
{
    const long out_size = R * PH * PW * C;
    if (out_size == 0 || H == 0 || W == 0) {
        /* An empty map: numpy's zeros, before it looks at the rois. */
        memset(out, 0, (size_t)(out_size > 0 ? out_size : 0) * (is_half ? 2 : 4));
        return 0;
    }
    Roi *geo = malloc(sizeof(Roi) * R);
    float *total = malloc(sizeof(float) * C), *rows = malloc(sizeof(float) * 4 * C);
    int status = 0;
    if (!geo || !total || !rows
        || !preamble(rois, R, N, PH, PW, spatial_scale, gamma_value, sampling_ratio, 1, is_half, geo)) {
        status = NUMPY_DECIDES;
        goto done;
    }
    *refused_steps = steps_over(geo, R, chunk_rois > 0 ? chunk_rois : 1, max_steps);
    if (*refused_steps >= 0) {
        status = STEPS_OVER;
        goto done;
    }
    const Forward f = {features, offset, H, W, C, R, PH, PW};
    (mmcv_v3(deform_roi_pool_mmcv_generic_only) ? forward_v3 : forward_generic)(&f, geo, is_half, rows, total, out);
done:
    free(geo);
    free(total);
    free(rows);
    return status;
}
