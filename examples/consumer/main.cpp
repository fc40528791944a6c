// A program outside the lockstep tree: builds a small MLP, trains it on a synthetic problem on
// two host devices and checks that it learned. Exits non-zero when something is wrong.
#include <cstdio>
#include <random>

#include <lockstep/lockstep.h>

int main() {
  try {
    // Two host devices: a replica each, gradients summed by the in-process host communicator.
    const std::vector<ls::Device> devices = ls::parse_devices("host:2");
    ls::DataParallel trainer(devices, ls::mlp_factory({8, 32, 4}),
                             ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.0f}));
    // Label = index of the largest of the first four features: learnable by a small MLP.
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    ls::data::Batch batch;
    batch.size = 64;
    for (int64_t i = 0; i < batch.size; ++i) {
      int best = 0;
      for (int f = 0; f < 8; ++f) {
        batch.images.push_back(normal(rng));
        if (f < 4 && batch.images.back() > batch.images[static_cast<size_t>(i * 8 + best)])
          best = f;
      }
      batch.labels.push_back(best);
    }
    const float first = trainer.step(batch).loss;
    float last = first;
    for (int step = 0; step < 200; ++step) last = trainer.step(batch).loss;
    std::printf("consumer: loss %.4f -> %.4f on %s\n", first, last,
                ls::devices_str(devices).c_str());
    return last < 0.5f * first ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
