// Mirrors torch/csrc/empty.c built as libtorch_global_deps.so: an empty library whose only job
// is its DT_NEEDED entries (the CUDA runtime), loaded RTLD_GLOBAL by torch/__init__.py
// (_load_global_deps) so that the runtime's symbols are in the global scope.
extern "C" void torchlike_global_deps() {}
