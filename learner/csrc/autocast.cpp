// fp16 autocast on CUDA through libtorch's current API. tch's `autocast`
// calls `at::autocast::set_enabled`/`is_enabled`, deprecated since PyTorch
// 2.4, which print a warning on every call (several per minibatch).
#include <ATen/autocast_mode.h>

extern "C" {

// Turns CUDA autocast on for this thread; returns whether it was on.
int rulka_autocast_cuda_enter(void) {
  try {
    bool was = at::autocast::is_autocast_enabled(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::increment_nesting();
    return was ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// Whether CUDA autocast is on for this thread (1), off (0), or unknown (-1).
int rulka_autocast_cuda_enabled(void) {
  try {
    return at::autocast::is_autocast_enabled(at::kCUDA) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// Leaves the autocast region `rulka_autocast_cuda_enter` opened.
void rulka_autocast_cuda_exit(int was) {
  try {
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(at::kCUDA, was == 1);
  } catch (...) {
  }
}

}
