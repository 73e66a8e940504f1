/* The plugin's name and version: defined here only. Every program's first
 * LOG line carries them (kio_log_ours, base/log.h), and tools/check-recipe.sh
 * finds KIO_PLUGIN_ID in a program file to tell ours from Kaldi's. */
#ifndef KIO_VERSION_H
#define KIO_VERSION_H

#define KIO_PLUGIN_NAME "kaldi-gpu-align"
#define KIO_PLUGIN_VERSION "0.9.0"
/* One string literal, so that it lies whole in the program file. */
#define KIO_PLUGIN_ID KIO_PLUGIN_NAME " " KIO_PLUGIN_VERSION

#endif
