/* The trainer's log files (prefix trn_log_): what the steps scripts leave
 * in EXP/log/ (align.X.JOB.log, acc.X.JOB.log, update.X.log), each framed as
 * run.pl frames a job's log ("# COMMAND", "# Started at", ..., "# Ended
 * (code 0) at"), holding the lines the Kaldi program would print, with its
 * name. A thread's lines go to the log it uses (trn_log_use), else to the
 * default log (trn_log_set_default: the lines of helper threads, e.g. the
 * aligner's), else to stderr; ERROR lines also reach stderr. */
#ifndef TRN_LOG_H
#define TRN_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_log trn_log;

/* Installs the routing (once, before any log is opened). */
void trn_log_init(void);
/* Opens path (truncated) for the lines of program prog; cmd: the Kaldi
 * command the log stands for (its header). NULL after an ERROR. */
trn_log *trn_log_open(const char *path, const char *prog, const char *cmd);
/* The calling thread's log from now on (NULL: none). */
void trn_log_use(trn_log *l);
void trn_log_set_default(trn_log *l);
/* A line as is (a program's echoed command line). */
void trn_log_raw(trn_log *l, const char *line);
/* Footer (elapsed time), closed; no thread may use it any more. */
void trn_log_close(trn_log *l);

#ifdef __cplusplus
}
#endif
#endif
