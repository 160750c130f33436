// undo_v_head_reorder: stored [R, K] value heads back to Hugging Face's [K, R].
#include "orchid/model/gguf_heads.h"

#include <cstring>

namespace orchid {

Status undo_v_head_reorder(std::span<const uint8_t> in, std::span<uint8_t> out, int k_heads,
                           int v_per_k, size_t head_bytes) {
  if (k_heads <= 0 || v_per_k <= 0 || head_bytes == 0)
    return err("value-head reorder: ", k_heads, " key heads, ", v_per_k,
               " value heads each and ", head_bytes, "-byte heads");
  const size_t heads = size_t(k_heads) * size_t(v_per_k);
  if (in.size() != heads * head_bytes || out.size() != in.size())
    return err("value-head reorder: ", in.size(), " bytes in and ", out.size(), " out for ", heads,
               " heads of ", head_bytes, " bytes");
  if (in.data() < out.data() + out.size() && out.data() < in.data() + in.size())
    return err("value-head reorder: input and output overlap");
  for (int k = 0; k < k_heads; ++k)
    for (int r = 0; r < v_per_k; ++r)
      std::memcpy(out.data() + (size_t(k) * v_per_k + r) * head_bytes,
                  in.data() + (size_t(r) * k_heads + k) * head_bytes, head_bytes);
  return {};
}

}  // namespace orchid
