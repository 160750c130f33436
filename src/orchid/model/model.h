// A loaded model: config, the canonical weights, and what keeps their memory alive.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/safetensors.h"
#include "orchid/model/weights.h"
#include "orchid/util/mapped_file.h"
#include "orchid/util/status.h"

namespace orchid {

// Which on-disk naming the checkpoint used.
enum class Layout {
  hf,   // Hugging Face original: model.language_model.* / model.*, lm_head.weight, raw norms
  mlx,  // MLX: language_model.model.*, switch_mlp experts, conv [C,K,1], norms stored as 1 + w
  gguf,  // llama.cpp's GGUF (one file or split): blk.N.*, metadata for config (model/gguf_weights.h)
};

struct LoadOptions {
  bool quantize_q4 = false;  // quantize dense matrices at load into MLX affine 4-bit group 64
};

struct Model {
  ModelConfig config;
  Layout layout = Layout::hf;
  std::string dir;
  Weights weights;
  std::unique_ptr<Checkpoint> checkpoint;  // the mapped files the weights point into
  std::vector<MappedFile> gguf;            // or the mapped GGUF file(s)
  std::deque<std::vector<uint8_t>> arena;  // buffers the loader made (quantized copies, ...)

  std::string layout_name() const {
    return layout == Layout::hf ? "hf" : layout == Layout::mlx ? "mlx" : "gguf";
  }
};

// Loads DIR (config.json + safetensors), or a FILE.gguf (config from its metadata; a split
// model by its part 1, NAME-00001-of-0000N.gguf). Every
// expected tensor is checked for presence, dtype and shape; errors name the tensor and file.
// (LoadOptions::quantize_q4 applies to safetensors checkpoints: a GGUF keeps its own types.)
Expected<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace orchid
