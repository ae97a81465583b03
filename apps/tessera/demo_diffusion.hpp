#pragma once
// `tessera demo --diffusion`: one denoising step through a Stable Diffusion
// UNet path (tessera/models/diffusion.hpp blocks), fused and unfused.
#include "demo.hpp"

namespace tessera::app {

// Uses opt.threads; each mode runs a warm-up pass, then one timed pass.
void run_diffusion_demo(const DemoOptions& opt);

}  // namespace tessera::app
