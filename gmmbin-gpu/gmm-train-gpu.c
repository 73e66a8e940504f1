/* gmm-train-gpu: the iteration loop of Kaldi's GMM training scripts in one
 * process (train/trainer.h). The scripts steps-gpu/train_mono.sh,
 * train_deltas.sh and train_lda_mllt.sh run Kaldi's initialisation and
 * then this program; it is not a Kaldi program and has no Kaldi
 * counterpart. See docs/trainer.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "train-graphs/train-graphs.h"
#include "train/trainer.h"

static const char *const kUsage =
    "Train a GMM system in one process: the iteration loop of steps/train_mono.sh,\n"
    "train_deltas.sh or train_lda_mllt.sh (used by steps-gpu/*.sh; see docs/trainer.md)\n"
    "Usage:  gmm-train-gpu [options] <exp-dir>\n"
    "e.g.: gmm-train-gpu --nj=4 --lang=data/lang --sdata=data/train/split4 \\\n"
    "  --feats='ark,s,cs:apply-cmvn ... | add-deltas ark:- ark:- |' --ali-in='ark:gunzip -c "
    "exp/tri1/ali.JOB.gz|' \\\n  --start-iter=1 --start-gauss=2000 --inc-gauss=520 exp/tri1\n";

static char *str(const char *s) {
  char *p = strdup(s);
  if (!p) exit(255);
  return p;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  tgraph_tune_malloc(argv);
  kio_opts *po = kio_opts_new(kUsage);
  trn_cfg c;
  trn_cfg_default(&c);
  char *lang = str(""), *sdata = str(""), *feats = str(""), *mllt_feats = str(""),
       *text = str(""), *ali_in = str(""), *realign = str("10 20 30"), *mllt = str(""),
       *hook = str(""), *sil = str(""), *use_gpu = str("optional"), *start_after = str("");
  int32_t nj = 1, start_iter = 1, num_iters = 35, max_inc = 25, start_gauss = 0, inc_gauss = 0,
          threads = 0, replicate = 1, start_after_pid = 0;
  int32_t stoch_seed = 777;
  double stoch_batch = 0.0, stoch_passes = 0.0, stoch_memory = 1.0;
  char *stoch_level = str("speaker");
  kio_opts_int(po, "nj", &nj, "Jobs of the data split (data/splitNJ/JOB)");
  kio_opts_string(po, "lang", &lang, "Lang directory (L.fst, phones/disambig.int)");
  kio_opts_string(po, "sdata", &sdata, "The data split (data/DIR/splitNJ)");
  kio_opts_string(po, "feats", &feats, "Features rspecifier; JOB is the job");
  kio_opts_string(po, "mllt-feats", &mllt_feats,
                  "Features after an MLLT update; JOB as above, ITER the iteration");
  kio_opts_string(po, "text", &text, "Transcripts (word ids) rspecifier; JOB as above");
  kio_opts_string(po, "ali-in", &ali_in, "Alignments to start from; JOB as above");
  kio_opts_bool(po, "equal-align", &c.equal_align,
                "Start with train_mono's pass 0: equal alignments and 0.mdl");
  kio_opts_int(po, "start-iter", &start_iter, "First iteration (its model: EXP/ITER.mdl)");
  kio_opts_int(po, "num-iters", &num_iters, "Number of iterations (the last model: NUM.mdl)");
  kio_opts_string(po, "realign-iters", &realign, "Iterations that realign");
  kio_opts_string(po, "mllt-iters", &mllt, "Iterations that estimate MLLT (--mllt-hook)");
  kio_opts_string(po, "mllt-hook", &hook,
                  "Shell command for an MLLT iteration (ITER set in its environment)");
  kio_opts_int(po, "max-iter-inc", &max_inc, "Last iteration that adds Gaussians");
  kio_opts_int(po, "start-gauss", &start_gauss, "--mix-up of the first update");
  kio_opts_int(po, "inc-gauss", &inc_gauss, "Gaussians added per iteration");
  kio_opts_float(po, "power", &c.power, "Exponent for the Gaussians per state");
  kio_opts_float(po, "beam", &c.align.beam, "Decoding beam of realignment");
  kio_opts_float(po, "first-beam", &c.first_beam, "Beam of iteration 1 (0: --beam)");
  kio_opts_float(po, "retry-beam", &c.align.retry_beam, "Retry beam of realignment");
  kio_opts_bool(po, "careful", &c.align.careful, "Careful alignment");
  kio_opts_float(po, "transition-scale", &c.align.transition_scale, "Transition-probability scale");
  kio_opts_float(po, "acoustic-scale", &c.align.acoustic_scale, "Acoustic scale");
  kio_opts_float(po, "self-loop-scale", &c.align.self_loop_scale, "Self-loop scale");
  kio_opts_float(po, "boost-silence", &c.boost_silence, "Factor of the silence pdfs' weights");
  kio_opts_string(po, "silence-phones", &sil, "Silence phones (colon-separated list)");
  kio_opts_float(po, "min-gaussian-occupancy", &c.est.min_gaussian_occupancy,
                 "MleDiagGmmOptions: Minimum occupancy to update a Gaussian.");
  kio_opts_float(po, "min-gaussian-weight", &c.est.min_gaussian_weight,
                 "MleDiagGmmOptions: Min Gaussian weight before we remove it.");
  kio_opts_double(po, "min-variance", &c.est.min_variance,
                  "MleDiagGmmOptions: Variance floor (absolute variance).");
  kio_opts_float(po, "transition-floor", &c.est.transition_floor,
                 "Floor for transition probabilities");
  kio_opts_float(po, "perturb-factor", &c.est.perturb_factor,
                 "While mixing up, perturb means by standard deviation times this factor.");
  kio_opts_float(po, "min-count", &c.est.min_count,
                 "Minimum per-Gaussian count enforced while mixing up and down.");
  kio_opts_string(po, "use-gpu", &use_gpu, "yes|no|optional|wait");
  kio_opts_bool(po, "write-graphs", &c.write_graphs, "Also write EXP/fsts.JOB.gz");
  kio_opts_bool(po, "ali-text", &c.ali_text, "Write EXP/ali.JOB.gz in text form");
  kio_opts_bool(po, "phone-stats", &c.phone_stats,
                "With the final alignments write EXP/phone_stats.JOB.gz and "
                "EXP/log/get_phone_alignments.JOB.log (analyze_alignments.sh's first step)");
  kio_opts_int(po, "num-threads", &threads, "CPU threads (0: this process's share of the cores)");
  kio_opts_double(po, "stochastic-batch", &stoch_batch,
                  "Stochastic mode: fraction of the data per update (0: off)");
  kio_opts_double(po, "stochastic-passes", &stoch_passes,
                  "Stochastic mode: full data passes in all (0: num-iters - 1)");
  kio_opts_double(po, "stochastic-memory", &stoch_memory,
                  "Stochastic mode: fraction of the data whose statistics are merged");
  kio_opts_string(po, "stochastic-level", &stoch_level, "Stochastic mode: speaker|utterance");
  kio_opts_int(po, "stochastic-seed", &stoch_seed, "Stochastic mode: random seed");
  kio_opts_string(po, "start-after", &start_after,
                  "Read the features and start the device, then wait until this file exists "
                  "(the script's stages before the loop): 'model' in it starts the training "
                  "graphs (the tree and first model are there) and waits on, 'go' trains, "
                  "anything else stops without training (exit 0); \"\": start at once");
  kio_opts_int(po, "start-after-pid", &start_after_pid,
               "With --start-after: fail if this process ends before the file appears");
  kio_opts_int(po, "dev-replicate", &replicate, "Developers: each utterance N times");
  kio_program_args(po, argc, argv, 1, 1);
  if (galign_parse_use_gpu(use_gpu, &c.use_gpu) != KIO_OK) {
    KIO_ERROR("Invalid value for --use-gpu: %s", use_gpu);
    kio_fatal_exit();
  }
  if (strcmp(stoch_level, "speaker") && strcmp(stoch_level, "utterance")) {
    KIO_ERROR("Invalid value for --stochastic-level: %s (speaker or utterance)", stoch_level);
    kio_fatal_exit();
  }
  if (stoch_batch < 0.0 || stoch_batch > 1.0 || stoch_passes < 0.0 || stoch_memory <= 0.0) {
    KIO_ERROR("Invalid stochastic mode: --stochastic-batch=%g (0 < batch <= 1, 0: off), "
              "--stochastic-passes=%g (>= 0), --stochastic-memory=%g (> 0)", stoch_batch,
              stoch_passes, stoch_memory);
    kio_fatal_exit();
  }
  if (stoch_batch > 0.0 && start_iter > 1) {
    KIO_ERROR("The stochastic mode starts from the first iteration: --start-iter=%d "
              "(the scripts' --stage above 1) is not supported with --stochastic-batch",
              (int)start_iter);
    kio_fatal_exit();
  }
  if (nj < 1 || !*lang || !*sdata || !*feats || !*text) {
    KIO_ERROR("--nj, --lang, --sdata, --feats and --text are required");
    kio_fatal_exit();
  }
  c.dir = kio_opts_arg(po, 1);
  c.lang = lang;
  c.sdata = sdata;
  c.nj = nj;
  c.feats = feats;
  c.mllt_feats = mllt_feats;
  c.text_rspec = text;
  c.ali_in = ali_in;
  c.start_iter = start_iter;
  c.num_iters = num_iters;
  c.realign_iters = realign;
  c.mllt_iters = mllt;
  c.mllt_hook = hook;
  c.max_iter_inc = max_inc;
  c.start_gauss = start_gauss;
  c.inc_gauss = inc_gauss;
  c.silence_csl = sil;
  c.threads = threads;
  c.stoch_batch = stoch_batch;
  c.stoch_passes = stoch_passes;
  c.stoch_memory = stoch_memory;
  c.stoch_speaker = !strcmp(stoch_level, "speaker");
  c.stoch_seed = (uint64_t)(uint32_t)stoch_seed;
  c.replicate = replicate;
  c.start_after = start_after;
  c.start_after_pid = start_after_pid;
  if (trn_run(&c) != KIO_OK) kio_fatal_exit();
  kio_opts_free(po);
  free(lang); free(sdata); free(feats); free(mllt_feats); free(text); free(ali_in);
  free(realign); free(mllt); free(hook); free(sil); free(use_gpu); free(stoch_level);
  free(start_after);
  return 0;
}
