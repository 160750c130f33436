// A test fixture with the tiny golden model (random weights of the real layer mix, 512 ids,
// MLX 4-bit) on the CPU backend, for tests that run the engine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"

namespace orchid {

class TinyCpuModel : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model(std::string(ORCHID_SOURCE_DIR) + "/tests/fixtures/golden/tiny/mlx4");
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    backend_ = make_cpu_backend(*model_);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace orchid
