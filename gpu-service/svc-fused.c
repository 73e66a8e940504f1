/* The accumulation of a fused alignment connection (svc-fused.h). */
#include "svc-fused.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "gpu-service/admission.h"
#include "gpu-service/svc-acc.h"

void gsvc_join_line(void *user, int level, const char *func, const char *file, int line,
                    const char *msg) {
  (void)level; (void)func; (void)file; (void)line;
  char *buf = user;
  size_t n = strlen(buf);
  snprintf(buf + n, 200 - n, "%s%s", n ? "; " : "", msg);
}

int gsvc_fuse(gsvc_fused *f, int d, uint64_t model, const kio_tmodel *tm, const kio_am_gmm *am,
              int use_cpu, char *why, size_t why_len) {
  char text[200] = "";
  f->acc = gsvc_acc_get(d, model, tm, am, use_cpu, &f->kind, text);
  if (!f->acc) {
    snprintf(why, why_len, "%s", text);
    return KIO_ERR;
  }
  f->model = model;
  f->failed = 0;
  if (!(f->sv = gacc_serve_new())) {
    gsvc_acc_end(d, model, f->acc, 0, 0);
    f->acc = NULL;
    snprintf(why, why_len, "out of memory");
    return KIO_ERR;
  }
  return KIO_OK;
}

int gsvc_fused_end(gsvc_fused *f, int d) {
  if (!f->acc) return KIO_OK;
  double t0 = kio_now_s();
  int rc = gacc_serve_fused_end(f->sv, f->acc);
  f->t_wait += kio_now_s() - t0;
  if (rc != KIO_OK) f->failed = 1;
  if (f->admitted) gsvc_mem_end_acc(d, f->acc);
  f->admitted = 0;
  return rc;
}

void gsvc_fused_start(gsvc_fused *f, galign_serve *sv, int d, uint8_t **buf, size_t *cap) {
  uint32_t seq, flags = galign_serve_flags(sv, &seq);
  if (!f->acc || !(flags & KIO_SVC_ALIGN_ACC)) return;
  int n = galign_serve_count(sv), k = 0;
  const kio_matrix **feats = malloc((size_t)(n > 0 ? n : 1) * sizeof *feats);
  const int32_t **ali = malloc((size_t)(n > 0 ? n : 1) * sizeof *ali);
  if (feats && ali)
    for (int i = 0; i < n; i++) {
      const galign_result *r = galign_serve_result(sv, i);
      if (!r->ok) continue;
      feats[k] = galign_serve_feats(sv, i);
      ali[k++] = r->ali;
    }
  if (!feats || !ali) k = 1;  /* out of memory: told as a failure with the next reply */
  if (k > 0) {
    gsvc_mem_begin_acc(d, f->acc);  /* waits its turn for device memory */
    f->admitted = 1;
  }
  if (gacc_serve_fused_start(f->sv, f->acc, k, feats && ali ? feats : NULL, ali, seq)) {
    uint8_t *b = f->held;  /* read by the accumulation */
    size_t c = f->held_cap;
    f->held = *buf;
    f->held_cap = *cap;
    *buf = b;
    *cap = c;
    f->started++;
  } else {
    gsvc_fused_end(f, d);
  }
  free(feats);
  free(ali);
}

void gsvc_fused_free(gsvc_fused *f, int d, int drop, int verbose) {
  gsvc_fused_end(f, d);
  gacc_serve_free(f->sv);
  gsvc_acc_end(d, f->model, f->acc, drop || f->failed, verbose);
  free(f->held);
}
