/* Stand-in of fault-cuda.cu in builds without CUDA: no context to break. */
#if !KIO_HAVE_CUDA
void gsvc_cuda_break_context(void);
void gsvc_cuda_break_context(void) {}
#else
typedef int gsvc_fault_nocuda_unused; /* ISO C: no empty translation unit */
#endif
