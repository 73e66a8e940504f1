/* Kaldi CompressedMatrix (reference 2.3): reading + bit-exact decompression
 * of CM / CM2 / CM3 and compression with Kaldi's methods 1..7.
 *
 * Bit-exactness: every expression below mirrors the C++ evaluation order and
 * types of matrix/compressed-matrix.cc (float vs double at each step). The
 * Makefile builds with -ffp-contract=off, so no FMA changes the rounding. */
#include "compressed-matrix.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/sys/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Stored layout after the token (the in-memory 'format' is implied by it). */
typedef struct { float min_value, range; int32_t num_rows, num_cols; } cm_header;
typedef struct { uint16_t p0, p25, p75, p100; } cm_colhdr;

/* C++ static_cast<int>(double) as x86 does it: out-of-range and NaN give
 * INT32_MIN (cvttsd2si), which Kaldi's clamps then map deterministically. */
static int trunc_int(double x) {
  if (!(x > -2147483649.0 && x < 2147483648.0)) return INT32_MIN;
  return (int)x;
}

/* Uint16ToFloat: min_value + range * 1.52590218966964e-05F * value, all float. */
static float u16_to_float(const cm_header *h, uint16_t v) {
  float step = h->range * 1.52590218966964e-05F;
  float t = step * (float)v;
  return h->min_value + t;
}

/* CharToFloat: the product (diff * int) is float, the scale by the reciprocal
 * constant and the final addition are double, the result rounded to float. */
static float char_to_float(float p0, float p25, float p75, float p100, uint8_t b) {
  if (b <= 64) {
    float d = (p25 - p0) * (float)b;
    return (float)((double)p0 + (double)d * (1 / 64.0));
  } else if (b <= 192) {
    float d = (p75 - p25) * (float)(b - 64);
    return (float)((double)p25 + (double)d * (1 / 128.0));
  } else {
    float d = (p100 - p75) * (float)(b - 192);
    return (float)((double)p75 + (double)d * (1 / 63.0));
  }
}

#if defined(__x86_64__)
/* char_to_float for rows [0, r1) of columns [c0, c0 + nc), nc <= 16: one
 * vector per row, a column per lane (the bytes gathered from the
 * column-major data), the branch chosen per lane by blending its constants,
 * then the scalar code's float product, double scale and double sum, and
 * rounding to float. The gather reads 4 bytes at each byte: the caller keeps
 * r1 <= rows - 3 so the last column does not read past the data. */
__attribute__((target("avx512f")))
static void cm1_rows_avx512(const unsigned char *bytes, size_t rows, size_t cols, size_t c0,
                            int nc, const float *p0, const float *p25, const float *p75,
                            const float *p100, size_t r1, float *out) {
  __mmask16 mk = (__mmask16)((1u << nc) - 1);
  __m512 P0 = _mm512_maskz_loadu_ps(mk, p0), P25 = _mm512_maskz_loadu_ps(mk, p25),
         P75 = _mm512_maskz_loadu_ps(mk, p75), P100 = _mm512_maskz_loadu_ps(mk, p100);
  __m512 D1 = _mm512_sub_ps(P25, P0), D2 = _mm512_sub_ps(P75, P25), D3 = _mm512_sub_ps(P100, P75);
  __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)c0),
                                                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                      10, 11, 12, 13, 14, 15)),
                                   _mm512_set1_epi32((int)rows));
  const __m512i lo8 = _mm512_set1_epi32(0xff), c64 = _mm512_set1_epi32(64),
                c192 = _mm512_set1_epi32(192);
  const __m512d s1 = _mm512_set1_pd(1 / 64.0), s2 = _mm512_set1_pd(1 / 128.0),
                s3 = _mm512_set1_pd(1 / 63.0);
  for (size_t r = 0; r < r1; r++) {
    __m512i b = _mm512_and_si512(
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mk,
                                    _mm512_add_epi32(idx, _mm512_set1_epi32((int)r)), bytes, 1),
        lo8);
    __mmask16 m1 = _mm512_cmple_epi32_mask(b, c64), m3 = _mm512_cmpgt_epi32_mask(b, c192);
    /* branch 2 by default, then 1 and 3 where they apply */
    __m512 base = _mm512_mask_mov_ps(_mm512_mask_mov_ps(P25, m1, P0), m3, P75);
    __m512 diff = _mm512_mask_mov_ps(_mm512_mask_mov_ps(D2, m1, D1), m3, D3);
    __m512i sub = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(c64, m1, _mm512_setzero_si512()), m3, c192);
    __m512 d = _mm512_mul_ps(diff, _mm512_cvtepi32_ps(_mm512_sub_epi32(b, sub)));
    __m256 res[2];
    /* lanes 0-7, then 8-15 (the extract index must be a constant) */
#define CM1_HALF(h)                                                                          \
    do {                                                                                     \
      __mmask8 a1 = (__mmask8)(m1 >> (8 * h)), a3 = (__mmask8)(m3 >> (8 * h));               \
      __m256 dh = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), h));          \
      __m256 bh = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(base), h));       \
      __m512d sc = _mm512_mask_mov_pd(_mm512_mask_mov_pd(s2, a1, s1), a3, s3);               \
      res[h] = _mm512_cvtpd_ps(_mm512_add_pd(_mm512_cvtps_pd(bh), _mm512_mul_pd(_mm512_cvtps_pd(dh), sc))); \
    } while (0)
    CM1_HALF(0);
    CM1_HALF(1);
#undef CM1_HALF
    __m512 rv = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(res[0])),
                                                    _mm256_castps_pd(res[1]), 1));
    _mm512_mask_storeu_ps(out + r * cols + c0, mk, rv);
  }
}


/* The same with AVX2, nc <= 8 columns per call. */
__attribute__((target("avx2")))
static void cm1_rows_avx2(const unsigned char *bytes, size_t rows, size_t cols, size_t c0,
                          int nc, const float *p0, const float *p25, const float *p75,
                          const float *p100, size_t r1, float *out) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(nc), lane);
  __m256 P0 = _mm256_maskload_ps(p0, mk), P25 = _mm256_maskload_ps(p25, mk),
         P75 = _mm256_maskload_ps(p75, mk), P100 = _mm256_maskload_ps(p100, mk);
  __m256 D1 = _mm256_sub_ps(P25, P0), D2 = _mm256_sub_ps(P75, P25), D3 = _mm256_sub_ps(P100, P75);
  __m256i idx = _mm256_mullo_epi32(_mm256_add_epi32(_mm256_set1_epi32((int)c0), lane),
                                   _mm256_set1_epi32((int)rows));
  const __m256i lo8 = _mm256_set1_epi32(0xff), c64 = _mm256_set1_epi32(64),
                c65 = _mm256_set1_epi32(65), c192 = _mm256_set1_epi32(192);
  const __m256d s1 = _mm256_set1_pd(1 / 64.0), s2 = _mm256_set1_pd(1 / 128.0),
                s3 = _mm256_set1_pd(1 / 63.0);
  for (size_t r = 0; r < r1; r++) {
    __m256i b = _mm256_and_si256(
        _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)bytes,
                                    _mm256_add_epi32(idx, _mm256_set1_epi32((int)r)), mk, 1),
        lo8);
    __m256i m1 = _mm256_cmpgt_epi32(c65, b), m3 = _mm256_cmpgt_epi32(b, c192);
    __m256 f1 = _mm256_castsi256_ps(m1), f3 = _mm256_castsi256_ps(m3);
    __m256 base = _mm256_blendv_ps(_mm256_blendv_ps(P25, P0, f1), P75, f3);
    __m256 diff = _mm256_blendv_ps(_mm256_blendv_ps(D2, D1, f1), D3, f3);
    __m256i sub = _mm256_blendv_epi8(_mm256_blendv_epi8(c64, _mm256_setzero_si256(), m1), c192, m3);
    __m256 d = _mm256_mul_ps(diff, _mm256_cvtepi32_ps(_mm256_sub_epi32(b, sub)));
    __m128 res[2];
#define CM1_HALF2(h, EXT)                                                                    \
    do {                                                                                     \
      __m256d a1 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(EXT(m1))),                      \
              a3 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(EXT(m3)));                      \
      __m256d sc = _mm256_blendv_pd(_mm256_blendv_pd(s2, s1, a1), s3, a3);                   \
      __m256d v = _mm256_add_pd(_mm256_cvtps_pd(EXT##_PS(base)),                             \
                                _mm256_mul_pd(_mm256_cvtps_pd(EXT##_PS(d)), sc));            \
      res[h] = _mm256_cvtpd_ps(v);                                                           \
    } while (0)
#define LO(x) _mm256_castsi256_si128(x)
#define LO_PS(x) _mm256_castps256_ps128(x)
#define HI(x) _mm256_extracti128_si256(x, 1)
#define HI_PS(x) _mm256_extractf128_ps(x, 1)
    CM1_HALF2(0, LO);
    CM1_HALF2(1, HI);
#undef CM1_HALF2
#undef LO
#undef LO_PS
#undef HI
#undef HI_PS
    __m256 rv = _mm256_set_m128(res[1], res[0]);
    float *o = out + r * cols + c0;
    if (nc == 8) {
      _mm256_storeu_ps(o, rv);
    } else {  /* no masked store: slow on some AMD cores */
      float tmp[8];
      _mm256_storeu_ps(tmp, rv);
      memcpy(o, tmp, sizeof(float) * (size_t)nc);
    }
  }
}
#endif

static int read_exact(FILE *f, void *buf, size_t n) {
  return n == 0 || fread(buf, 1, n, f) == n;
}

/* Reads n bytes to (*buf)[off..], growing *buf (*cap bytes). Past 16 MB the
 * buffer grows only as data really arrives, so a corrupt header (up to 2 GB
 * of data claimed in 16 bytes) fails at the end of the stream without a huge
 * allocation. Returns 1, 0 on a short read and -1 when out of memory. */
static int read_growing(FILE *f, size_t off, size_t n, unsigned char **buf, size_t *cap) {
  const size_t chunk = (size_t)1 << 24;
  size_t done = 0;
  while (done < n) {
    size_t k = n - done < chunk ? n - done : chunk;
    if (off + done + k > *cap) {
      size_t nc = 2 * *cap < off + done + k ? off + done + k : 2 * *cap;
      if (nc > off + n) nc = off + n;
      unsigned char *p = realloc(*buf, nc);
      if (!p) return -1;
      *buf = p;
      *cap = nc;
    }
    if (!read_exact(f, *buf + off + done, k)) return 0;
    done += k;
  }
  return 1;
}

int kio_cmatrix_read_raw(FILE *f, int *format, unsigned char **buf, size_t *cap) {
  char tok[64];
  if (kio_read_token(f, 1, tok, sizeof tok) != KIO_OK) return KIO_ERR;
  if (strcmp(tok, "CM") == 0) *format = 1;
  else if (strcmp(tok, "CM2") == 0) *format = 2;
  else if (strcmp(tok, "CM3") == 0) *format = 3;
  else {
    kio_set_error("Unexpected token %s, expecting CM, CM2 or CM3", tok);
    return KIO_ERR;
  }
  unsigned char hb[16];
  if (!read_exact(f, hb, 16)) {
    kio_set_error("Failed to read compressed-matrix header (truncated)");
    return KIO_ERR;
  }
  cm_header h;
  memcpy(&h.num_rows, hb + 8, 4);
  memcpy(&h.num_cols, hb + 12, 4);
  size_t data_bytes = 0;
  if (h.num_cols != 0) {  /* else an empty matrix: nothing follows */
    if (h.num_rows < 0 || h.num_cols < 0 || (int64_t)h.num_rows * h.num_cols > INT32_MAX) {
      kio_set_error("Bad compressed-matrix size %d x %d", h.num_rows, h.num_cols);
      return KIO_ERR;
    }
    size_t rows = (size_t)h.num_rows, cols = (size_t)h.num_cols, n = rows * cols;
    data_bytes = *format == 1 ? cols * sizeof(cm_colhdr) + n : *format == 2 ? 2 * n : n;
  }
  if (*cap < 16) {
    unsigned char *p = realloc(*buf, 16);
    if (!p) {
      kio_set_error("Out of memory reading a compressed matrix");
      return KIO_ERR;
    }
    *buf = p;
    *cap = 16;
  }
  memcpy(*buf, hb, 16);
  int got = read_growing(f, 16, data_bytes, buf, cap);
  if (got < 0) {
    kio_set_error("Out of memory reading %zu-byte compressed matrix", data_bytes);
    return KIO_ERR;
  }
  if (got == 0) {
    kio_set_error("Failed to read compressed-matrix data (%d x %d, CM%s): "
                  "truncated", h.num_rows, h.num_cols,
                  *format == 1 ? "" : *format == 2 ? "2" : "3");
    return KIO_ERR;
  }
  return KIO_OK;
}

int64_t kio_cmatrix_body_bytes(FILE *f) {
  char tok[64];
  if (kio_read_token(f, 1, tok, sizeof tok) != KIO_OK) return -1;
  int format = !strcmp(tok, "CM") ? 1 : !strcmp(tok, "CM2") ? 2 : !strcmp(tok, "CM3") ? 3 : 0;
  unsigned char hb[16];
  if (!format || !read_exact(f, hb, 16)) return -1;
  int32_t rows, cols;
  memcpy(&rows, hb + 8, 4);
  memcpy(&cols, hb + 12, 4);
  if (cols == 0) return 0;
  if (rows < 0 || cols < 0 || (int64_t)rows * cols > INT32_MAX) return -1;
  int64_t n = (int64_t)rows * cols;
  return format == 1 ? cols * (int64_t)sizeof(cm_colhdr) + n : format == 2 ? 2 * n : n;
}

int kio_cmatrix_read_float(FILE *f, kio_matrix *m) {
  unsigned char *buf = NULL;
  size_t cap = 0;
  int format, rc = kio_cmatrix_read_raw(f, &format, &buf, &cap);
  /* cols == 0: Kaldi's empty matrix, nothing decompressed */
  if (rc == KIO_OK) rc = kio_cmatrix_decompress(format, buf, buf + 16, m);
  free(buf);
  return rc;
}

int kio_cmatrix_decompress(int format, const unsigned char *hb, const unsigned char *buf,
                           kio_matrix *m) {
  cm_header h;
  memcpy(&h.min_value, hb, 4);
  memcpy(&h.range, hb + 4, 4);
  memcpy(&h.num_rows, hb + 8, 4);
  memcpy(&h.num_cols, hb + 12, 4);
  if (h.num_rows <= 0 || h.num_cols <= 0) {  /* an empty matrix as far as we care */
    kio_matrix_resize(m, 0, 0);
    return KIO_OK;
  }
  size_t rows = (size_t)h.num_rows, cols = (size_t)h.num_cols, n = rows * cols;
  if (kio_matrix_resize(m, h.num_rows, h.num_cols) != KIO_OK) return KIO_ERR;
  float *out = m->data;
  if (format == 1) {
    const unsigned char *bytes = buf + cols * sizeof(cm_colhdr);
    size_t r0 = 0;  /* rows [0, r0) done by the vector code */
#if defined(__x86_64__)
    int level = kio_simd_level(), width = level >= KIO_SIMD_AVX512 ? 16 : 8;
    if (level >= KIO_SIMD_AVX2 && rows > 3) {
      r0 = rows - 3;
      for (size_t c0 = 0; c0 < cols; c0 += (size_t)width) {
        float pc[4][16];
        int nc = cols - c0 < (size_t)width ? (int)(cols - c0) : width;
        for (int i = 0; i < nc; i++) {
          cm_colhdr ch;
          memcpy(&ch, buf + (c0 + i) * sizeof(cm_colhdr), sizeof ch);
          pc[0][i] = u16_to_float(&h, ch.p0), pc[1][i] = u16_to_float(&h, ch.p25);
          pc[2][i] = u16_to_float(&h, ch.p75), pc[3][i] = u16_to_float(&h, ch.p100);
        }
        if (width == 16) cm1_rows_avx512(bytes, rows, cols, c0, nc, pc[0], pc[1], pc[2], pc[3], r0, out);
        else cm1_rows_avx2(bytes, rows, cols, c0, nc, pc[0], pc[1], pc[2], pc[3], r0, out);
      }
    }
#endif
    for (size_t c = 0; c < cols; c++) {
      cm_colhdr ch;
      memcpy(&ch, buf + c * sizeof(cm_colhdr), sizeof ch);
      float p0 = u16_to_float(&h, ch.p0), p25 = u16_to_float(&h, ch.p25),
            p75 = u16_to_float(&h, ch.p75), p100 = u16_to_float(&h, ch.p100);
      const unsigned char *col = bytes + c * rows;  /* column-major bytes */
      for (size_t r = r0; r < rows; r++)
        out[r * cols + c] = char_to_float(p0, p25, p75, p100, col[r]);
    }
  } else {
    /* increment = range * (1.0/65535.0) in double, stored as float; value =
     * min_value + data * increment in float. */
    float inc = (float)((double)h.range * (format == 2 ? 1.0 / 65535.0 : 1.0 / 255.0));
    float minv = h.min_value;
    if (format == 2) {
      for (size_t i = 0; i < n; i++) {
        uint16_t v;
        memcpy(&v, buf + 2 * i, 2);
        out[i] = minv + (float)v * inc;
      }
    } else {
      for (size_t i = 0; i < n; i++) out[i] = minv + (float)buf[i] * inc;
    }
  }
  return KIO_OK;
}


/* ---- compression ---- */

static uint16_t float_to_u16(const cm_header *h, float value) {
  float f = (value - h->min_value) / h->range;
  if (f > 1.0) f = 1.0f;
  if (f < 0.0) f = 0.0f;
  return (uint16_t)trunc_int((double)(f * 65535.0f) + 0.499);
}

static uint8_t float_to_u8(const cm_header *h, float value) {
  float f = (value - h->min_value) / h->range;
  if (f > 1.0) f = 1.0f;
  if (f < 0.0) f = 0.0f;
  return (uint8_t)trunc_int((double)(f * 255.0f) + 0.499);
}

static uint8_t float_to_char(float p0, float p25, float p75, float p100, float v) {
  int ans;
  if (v < p25) {
    float f = (v - p0) / (p25 - p0);
    ans = trunc_int((double)(f * 64.0f) + 0.5);
    if (ans < 0) ans = 0;
    if (ans > 64) ans = 64;
  } else if (v < p75) {
    float f = (v - p25) / (p75 - p25);
    ans = 64 + trunc_int((double)(f * 128.0f) + 0.5);
    if (ans < 64) ans = 64;
    if (ans > 192) ans = 192;
  } else {
    float f = (v - p75) / (p100 - p75);
    ans = 192 + trunc_int((double)(f * 63.0f) + 0.5);
    if (ans < 192) ans = 192;
    if (ans > 255) ans = 255;
  }
  return (uint8_t)ans;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static uint16_t u16_min(int a, int b) { return (uint16_t)(a < b ? a : b); }
static uint16_t u16_max(int a, int b) { return (uint16_t)(a > b ? a : b); }

/* ComputeColHeader. Kaldi's nth_element sequence leaves exactly the order
 * statistics at 0, n/4, 3(n/4), n-1, so sorting gives the same values. */
static void col_header(const cm_header *h, float *sorted, int n, cm_colhdr *ch) {
  qsort(sorted, (size_t)n, sizeof(float), cmp_float);
  if (n >= 5) {
    int q = n / 4;
    ch->p0 = u16_min(float_to_u16(h, sorted[0]), 65532);
    ch->p25 = u16_min(u16_max(float_to_u16(h, sorted[q]), ch->p0 + 1), 65533);
    ch->p75 = u16_min(u16_max(float_to_u16(h, sorted[3 * q]), ch->p25 + 1), 65534);
    ch->p100 = u16_max(float_to_u16(h, sorted[n - 1]), ch->p75 + 1);
  } else {
    ch->p0 = u16_min(float_to_u16(h, sorted[0]), 65532);
    ch->p25 = n > 1 ? u16_min(u16_max(float_to_u16(h, sorted[1]), ch->p0 + 1), 65533)
                    : (uint16_t)(ch->p0 + 1);
    ch->p75 = n > 2 ? u16_min(u16_max(float_to_u16(h, sorted[2]), ch->p25 + 1), 65534)
                    : (uint16_t)(ch->p25 + 1);
    ch->p100 = n > 3 ? u16_max(float_to_u16(h, sorted[3]), ch->p75 + 1)
                     : (uint16_t)(ch->p75 + 1);
  }
}

static void put_header(unsigned char *p, const cm_header *h) {
  memcpy(p, &h->min_value, 4);
  memcpy(p + 4, &h->range, 4);
  memcpy(p + 8, &h->num_rows, 4);
  memcpy(p + 12, &h->num_cols, 4);
}

int kio_matrix_write_compressed(FILE *f, const kio_matrix *m, int method) {
  if (method < KIO_CM_AUTO || method > KIO_CM_ONE_BYTE_ZERO_ONE) {
    kio_set_error("Invalid compression type: %d", method);
    return KIO_ERR;
  }
  if (m->rows == 0 || m->cols == 0) {
    /* Kaldi writes "CM " + 20 bytes here (its format field included), which
     * its own reader mis-parses; we write the 16 bytes the reader consumes. */
    cm_header h = {0.0f, 0.0f, 0, 0};
    unsigned char hb[16];
    put_header(hb, &h);
    kio_write_token(f, 1, "CM");
    if (fwrite(hb, 1, 16, f) != 16 || ferror(f)) {
      kio_set_error("Error writing compressed matrix to stream.");
      return KIO_ERR;
    }
    return KIO_OK;
  }
  size_t rows = (size_t)m->rows, cols = (size_t)m->cols, n = rows * cols;
  const float *d = m->data;
  if (method == KIO_CM_AUTO)
    method = m->rows > 8 ? KIO_CM_SPEECH_FEATURE : KIO_CM_TWO_BYTE_AUTO;
  int format = method == KIO_CM_SPEECH_FEATURE ? 1
               : (method == KIO_CM_TWO_BYTE_AUTO || method == KIO_CM_TWO_BYTE_SIGNED_INT) ? 2 : 3;
  cm_header h = {0.0f, 0.0f, m->rows, m->cols};
  switch (method) {
    case KIO_CM_SPEECH_FEATURE: case KIO_CM_TWO_BYTE_AUTO: case KIO_CM_ONE_BYTE_AUTO: {
      float mn = d[0], mx = d[0];
      for (size_t i = 0; i < n; i++) {
        if (d[i] < mn) mn = d[i];
        if (d[i] > mx) mx = d[i];
      }
      if (mx == mn) mx = (float)((double)mn + (1.0 + fabs((double)mn)));
      if (!isfinite(mn) || !isfinite(mx)) {
        kio_set_error("Cannot compress a matrix with Nan's or Inf's");
        return KIO_ERR;
      }
      h.min_value = mn;
      h.range = mx - mn;
      if (!(h.range > 0.0f)) {
        kio_set_error("Cannot compress matrix: zero range");
        return KIO_ERR;
      }
      break;
    }
    case KIO_CM_TWO_BYTE_SIGNED_INT: h.min_value = -32768.0f; h.range = 65535.0f; break;
    case KIO_CM_ONE_BYTE_UNSIGNED_INT: h.min_value = 0.0f; h.range = 255.0f; break;
    default: h.min_value = 0.0f; h.range = 1.0f; break;  /* zero-one */
  }
  size_t bytes = format == 1 ? cols * sizeof(cm_colhdr) + n : format == 2 ? 2 * n : n;
  unsigned char *buf = malloc(16 + bytes);
  float *col = format == 1 ? malloc(rows * sizeof(float)) : NULL;
  if (!buf || (format == 1 && !col)) {
    free(buf);
    free(col);
    kio_set_error("Out of memory compressing %zu x %zu matrix", rows, cols);
    return KIO_ERR;
  }
  put_header(buf, &h);
  unsigned char *p = buf + 16;
  if (format == 1) {
    unsigned char *bytes_out = p + cols * sizeof(cm_colhdr);
    for (size_t c = 0; c < cols; c++) {
      for (size_t r = 0; r < rows; r++) col[r] = d[r * cols + c];
      cm_colhdr ch;
      col_header(&h, col, (int)rows, &ch);
      memcpy(p + c * sizeof ch, &ch, sizeof ch);
      float p0 = u16_to_float(&h, ch.p0), p25 = u16_to_float(&h, ch.p25),
            p75 = u16_to_float(&h, ch.p75), p100 = u16_to_float(&h, ch.p100);
      for (size_t r = 0; r < rows; r++)
        bytes_out[c * rows + r] = float_to_char(p0, p25, p75, p100, d[r * cols + c]);
    }
  } else if (format == 2) {
    for (size_t i = 0; i < n; i++) {
      uint16_t v = float_to_u16(&h, d[i]);
      memcpy(p + 2 * i, &v, 2);
    }
  } else {
    for (size_t i = 0; i < n; i++) p[i] = float_to_u8(&h, d[i]);
  }
  kio_write_token(f, 1, format == 1 ? "CM" : format == 2 ? "CM2" : "CM3");
  int ok = fwrite(buf, 1, 16 + bytes, f) == 16 + bytes && !ferror(f);
  free(buf);
  free(col);
  if (!ok) {
    kio_set_error("Error writing compressed matrix to stream.");
    return KIO_ERR;
  }
  return KIO_OK;
}
