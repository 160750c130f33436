#!/usr/bin/env python3
"""Trains orchid's demo model (issue 7 item 3): a small model of the qwen3_5_moe architecture
(Gated DeltaNet and gated attention layers 3:1, 16 routed experts top-4 plus a shared expert)
with Hugging Face transformers on one GPU, then writes it in the MLX affine 4-bit layout orchid
loads, with HF reference numbers computed on exactly the dequantised weights orchid runs.

One run (scripts/device/run.sh demo-model), in four phases:
  1. tokenise corpus (make_corpus.py) with the demo tokenizer (train_tokenizer.py);
  2. dry run: a fresh model, 2 optimizer steps, the whole export + evaluation into a scratch
     folder, so that a bug costs a minute, not the training budget;
  3. train for --minutes of wall clock (bf16 autocast on fp32 weights, AdamW, cosine schedule);
  4. export + evaluate (see export_and_evaluate).

  scripts/demo-model/train_model.py --corpus DIR --tokenizer DIR --out DIR [--minutes 6] [--seed 0]

Writes OUT/{model.safetensors, config.json, heldout-eval.txt, heldout-eval.ref.npy,
results.json, train.log} and nothing else; the HF bf16 checkpoint goes to a scratch folder
under /tmp.
  model.safetensors, config.json  MLX affine 4-bit, group 64 (8-bit router and shared-expert
                       gate), make_golden's layout, in one file
  heldout-eval.txt     the first held-out documents (>= 4097 tokens, nothing added: no BOS)
  heldout-eval.ref.npy float32 [n_tokens, 1 + 2*32]; row t from HF's fp32 logits at position t
                       on the dequantised weights: column 0 their logsumexp, columns 1..32 the
                       top-32 token ids (exact in float32) by descending logit, 33..64 those logits
  results.json         perplexities, noise floor, quantisation cost, training, sizes, samples
  train.log            everything printed

Needs torch, transformers (qwen3_5_moe), tokenizers, numpy; reuses
scripts/fixtures/make_golden.py for the config check, the layouts and the quantiser.
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from make_golden import (FULL, LIN, build_hf_config, build_model, canon_params,  # noqa: E402
                         dequantized_copy, hf_context, hf_layout_tensors, is_zero_centred_norm,
                         load_safetensors_np, logits_of, mlx_layout, selftest_quant, set_impls,
                         text_model_of, to_bf16_like_from_pretrained, write_hf, write_mlx)

# The model (flat qwen3_5_moe_text config, like make_golden's `odd`). Every quantised matrix
# has an input dim that is a multiple of 64 (384, 256, 128, 64), so all of them are quantised.
DEMO_CONFIG = {
    "architectures": ["Qwen3_5MoeForCausalLM"],
    "model_type": "qwen3_5_moe_text",
    "vocab_size": 4122,  # 4096 learned tokens + Qwen's 26 added tokens
    "hidden_size": 384,
    "num_hidden_layers": 8,
    "layer_types": [LIN, LIN, LIN, FULL] * 2,
    "full_attention_interval": 4,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "partial_rotary_factor": 0.25,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [3, 3, 2],  # 16 rotary dims = 8 frequencies; text uses one position
        "mrope_interleaved": True,
    },
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    "router_aux_loss_coef": 0.01,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "attention_bias": False,
    "attn_output_gate": True,
    "tie_word_embeddings": False,
    "mtp_num_hidden_layers": 0,
    "mamba_ssm_dtype": "float32",
    "dtype": "bfloat16",
}

SEQ = 512              # tokens per training sequence and per held-out window
BATCH = 64             # sequences per optimizer step: 32768 tokens
LR_PEAK, LR_FINAL = 2e-3, 0.1  # cosine decay to LR_FINAL * LR_PEAK
WARMUP = 100
WEIGHT_DECAY, BETAS, GRAD_CLIP = 0.1, (0.9, 0.95), 1.0
INIT_STD = 0.02        # output projections get INIT_STD / sqrt(2 * layers) (GPT-2)
OUTPUT_PROJECTIONS = ("self_attn.o_proj.weight", "linear_attn.out_proj.weight",
                      "shared_expert.down_proj.weight", "experts.down_proj")
MEASURE_STEPS = (5, 25)  # the step time that sizes the schedule is timed over these steps
assert MEASURE_STEPS[1] < WARMUP  # the schedule's length is known before warm-up ends
LOG_EVERY, PROBE_EVERY, PROBE_WINDOWS = 50, 500, 32
EVAL_BATCH = 32        # held-out windows per forward call
EVAL_TEXT_MIN_TOKENS = 4097
REF_TOP_K = 32
N_SAMPLES, SAMPLE_MAX_NEW = 10, 64
MLX_LIMIT_BYTES = 12_000_000    # our tooling's limit for the committed checkpoint
FILE_LIMIT_BYTES = 16 * 2**20   # the device tool returns files below 16 MiB
OUTPUT_FILES = {"model.safetensors", "config.json", "heldout-eval.txt", "heldout-eval.ref.npy",
                "results.json", "train.log"}
EOT, IM_END = "<|endoftext|>", "<|im_end|>"
# One rendered conversation of chat_*.txt (Qwen3.6 template, thinking off).
CHAT_RE = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>\n<\|im_start\|>assistant\n"
                     r"<think>\n\n</think>\n\n(.*?)<\|im_end\|>", re.S)


class Log:
    """Prints each line (flushed) and appends it to train.log."""

    def __init__(self, path):
        self.file = open(path, "w", encoding="utf-8")

    def __call__(self, msg):
        print(msg, flush=True)
        self.file.write(msg + "\n")
        self.file.flush()


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------

@dataclass
class Corpus:
    train: np.ndarray           # [n_train_seq, SEQ] int64, the packed training stream
    heldout: np.ndarray         # [n_heldout_windows, SEQ] int64, packed the same way
    unigram_counts: np.ndarray  # [vocab] int64 token counts of `train`
    eval_text: str              # heldout-eval.txt: the first held-out documents
    eval_ids: list              # its tokens, nothing added
    chats: list                 # [(rendered conversation, question, answer)] first held-out chats
    stats: dict


def read_docs(path):
    """make_corpus.py writes one document per paragraph, blank-line separated."""
    return [d.strip() for d in path.read_text(encoding="utf-8").split("\n\n") if d.strip()]


def read_chats(path):
    """Rendered conversations, concatenated; each one starts with the user turn."""
    chats = [c for c in re.split(r"(?=<\|im_start\|>user\n)", path.read_text(encoding="utf-8")) if c]
    if not chats or not all(CHAT_RE.match(c) for c in chats[:N_SAMPLES]):
        raise RuntimeError(f"{path}: not conversations rendered by the Qwen3.6 template")
    return chats


def encode_items(tok, items):
    """Each item's tokens (nothing added by the tokenizer) followed by <|endoftext|>."""
    eot = tok.token_to_id(EOT)
    return [np.array(e.ids + [eot], dtype=np.int64)
            for e in tok.encode_batch(items, add_special_tokens=False)]


def pack(items, rng):
    """Items in a seeded random order, concatenated and cut into [n, SEQ] (tail dropped)."""
    ids = np.concatenate([items[i] for i in rng.permutation(len(items))])
    n = len(ids) // SEQ
    return ids[:n * SEQ].reshape(n, SEQ)


def first_docs_text(tok, docs):
    """The shortest prefix of whole documents, joined as heldout.txt joins them, that has at
    least EVAL_TEXT_MIN_TOKENS tokens (more than 4096). Returns (text, its tokens)."""
    for k in range(1, len(docs) + 1):
        text = "\n\n".join(docs[:k])
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(ids) >= EVAL_TEXT_MIN_TOKENS:
            return text, ids
    raise RuntimeError("the held-out documents have fewer than 4097 tokens")


def load_corpus(corpus_dir, tok, seed, log):
    t0 = time.time()
    train_docs, train_chats = read_docs(corpus_dir / "train.txt"), read_chats(corpus_dir / "chat_train.txt")
    held_docs, held_chats = read_docs(corpus_dir / "heldout.txt"), read_chats(corpus_dir / "chat_heldout.txt")
    rng = np.random.default_rng(seed)
    train = pack(encode_items(tok, train_docs + train_chats), rng)
    heldout = pack(encode_items(tok, held_docs + held_chats), rng)
    eval_text, eval_ids = first_docs_text(tok, held_docs)
    chats = [(c, *CHAT_RE.match(c).groups()) for c in held_chats[:N_SAMPLES]]
    stats = {"train_docs": len(train_docs), "train_chats": len(train_chats),
             "heldout_docs": len(held_docs), "heldout_chats": len(held_chats),
             "train_tokens": int(train.size), "heldout_tokens": int(heldout.size),
             "eval_text_docs": eval_text.count("\n\n") + 1, "eval_text_tokens": len(eval_ids)}
    log(f"corpus: {stats} ({time.time() - t0:.1f} s)")
    counts = np.bincount(train.ravel(), minlength=DEMO_CONFIG["vocab_size"])
    return Corpus(train, heldout, counts, eval_text, eval_ids, chats, stats)


# --------------------------------------------------------------------------------------
# Model and training
# --------------------------------------------------------------------------------------

def init_for_training(params, torch):
    """GPT-2-style normal init; DeltaNet decay parameters as in Mamba / flash-linear-attention
    (per-head A in [1, 16], dt in [1e-3, 0.1]) so the initial state decays neither at once nor
    never; norms start at scale 1 (zero-centred norms at w = 0)."""
    out_std = INIT_STD / math.sqrt(2 * DEMO_CONFIG["num_hidden_layers"])
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            if name.endswith("linear_attn.A_log"):
                p.copy_(torch.empty_like(p).uniform_(1.0, 16.0).log())
            elif name.endswith("linear_attn.dt_bias"):
                dt = torch.empty_like(p).uniform_(math.log(1e-3), math.log(0.1)).exp()
                p.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
            elif name.endswith("linear_attn.norm.weight"):
                p.fill_(1.0)
            elif is_zero_centred_norm(name):
                p.zero_()
            elif name.endswith("conv1d.weight"):  # [C, 1, K]: PyTorch's default bound 1/sqrt(K)
                bound = 1.0 / math.sqrt(p.shape[-1])
                p.uniform_(-bound, bound)
            elif name.endswith(OUTPUT_PROJECTIONS):
                p.normal_(0.0, out_std)
            elif p.ndim >= 2:  # embeddings, lm_head, input projections, router, expert gate/up
                p.normal_(0.0, INIT_STD)
            else:
                raise RuntimeError(f"no init rule for {name} {tuple(p.shape)}")


def build(C, config_dir, seed, log):
    """A freshly initialised fp32 model on the device, from DEMO_CONFIG written as config.json
    (so transformers validates the file), with the training implementations: SDPA attention
    (flash under bf16 autocast) and eager experts: a loop over the 16 experts, each a bf16 GEMM
    under autocast. (HF's batched_mm gathers a [2I, H] weight per token-expert pair, over 25 GB
    a step here; its grouped_mm calls torch._grouped_mm on the fp32 weights, which autocast does
    not list as far as we could check.)"""
    torch = C.torch
    torch.manual_seed(seed)
    _, text_cfg = build_hf_config(DEMO_CONFIG, config_dir, C, log)
    model, text_model, cls = build_model(text_cfg, None, C, log)
    if model.lm_head.weight.data_ptr() == text_model.embed_tokens.weight.data_ptr():
        raise RuntimeError("lm_head is tied to embed_tokens; the config says untied")
    params = canon_params(model, text_model)
    init_for_training(params, torch)
    set_impls(model, C, log, attn="sdpa")
    log(f"model: {cls}, {sum(p.numel() for p in params.values())} parameters")
    return model.to(C.device)


def lr_at(step, total):
    """Linear warm-up over WARMUP steps, then cosine from LR_PEAK to LR_FINAL * LR_PEAK at `total`."""
    if step < WARMUP:
        return LR_PEAK * (step + 1) / WARMUP
    frac = min(1.0, (step - WARMUP) / max(1, total - WARMUP))
    return LR_PEAK * (LR_FINAL + (1 - LR_FINAL) * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model, torch):
    """AdamW; weight decay on matrices only (not on norms, A_log, dt_bias)."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR_PEAK, betas=BETAS, fused=True)


def train_step(model, opt, x, lr, torch):
    """One optimizer step on x [BATCH, SEQ]. Returns (cross-entropy, router aux loss), on the GPU."""
    for g in opt.param_groups:
        g["lr"] = lr
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=x, use_cache=False, output_router_logits=True)
    if not torch.is_tensor(out.aux_loss):
        raise RuntimeError(f"output_router_logits=True gave no router aux loss: {out.aux_loss!r}")
    logits = out.logits[:, :-1].flatten(0, 1).float()  # [BATCH*(SEQ-1), vocab]
    ce = torch.nn.functional.cross_entropy(logits, x[:, 1:].flatten())
    loss = ce + DEMO_CONFIG["router_aux_loss_coef"] * out.aux_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    opt.step()
    return ce.detach(), out.aux_loss.detach()


def train(model, corpus, C, log, seed, minutes=None, steps=None):
    """Trains for `steps` optimizer steps, or for `minutes` of wall clock: the schedule's length
    comes from the step time measured over MEASURE_STEPS. Epochs reshuffle the sequences."""
    torch = C.torch
    data = torch.from_numpy(corpus.train).to(C.device)
    probe = torch.from_numpy(corpus.heldout[:PROBE_WINDOWS]).to(C.device)
    gen = torch.Generator().manual_seed(seed)
    opt = make_optimizer(model, torch)
    budget = minutes * 60 if minutes else None
    total = steps
    model.train()
    t0 = t_log = time.time()
    order, pos, epoch, step, ce_sum, n_sum, last_ce = None, data.shape[0], 0, 0, 0.0, 0, math.nan
    while total is None or step < total:
        if pos + BATCH > data.shape[0]:
            order, pos, epoch = torch.randperm(data.shape[0], generator=gen).to(C.device), 0, epoch + 1
        x = data[order[pos:pos + BATCH]]
        pos += BATCH
        ce, aux = train_step(model, opt, x, lr_at(step, total), torch)
        ce_sum, n_sum, step = ce_sum + ce, n_sum + 1, step + 1
        if budget and step in MEASURE_STEPS:
            torch.cuda.synchronize()
            if step == MEASURE_STEPS[0]:
                t_measure = time.time()
            else:
                step_s = (time.time() - t_measure) / (MEASURE_STEPS[1] - MEASURE_STEPS[0])
                total = step + max(1, int((budget - (time.time() - t0)) / step_s))
                log(f"step time {step_s * 1e3:.1f} ms, {BATCH * SEQ / step_s:.0f} tokens/s, "
                    f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB: "
                    f"{total} steps, {total * BATCH * SEQ / corpus.train.size:.1f} epochs")
        if step % LOG_EVERY == 0 or step == total:
            mean_ce = float(ce_sum) / n_sum
            if not math.isfinite(mean_ce):
                raise RuntimeError(f"step {step}: loss {mean_ce}")
            now = time.time()
            log(f"step {step} loss {mean_ce:.4f} aux {float(aux):.3f} lr {lr_at(step - 1, total):.2e} "
                f"tok/s {n_sum * BATCH * SEQ / (now - t_log):.0f} elapsed {now - t0:.0f} s epoch {epoch}")
            last_ce, ce_sum, n_sum, t_log = mean_ce, 0.0, 0, now
        if step % PROBE_EVERY == 0 or step == total:
            model.eval()
            log(f"step {step} held-out ppl ({probe.numel()} tokens) {stream_ppl(model, probe, C):.3f}")
            model.train()
        if budget and time.time() - t0 > 1.1 * budget:
            log(f"step {step}: past 110 % of the time budget; stopping")
            break
    torch.cuda.synchronize()
    seconds = time.time() - t0
    return {"peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30, "steps": step, "tokens_seen": step * BATCH * SEQ, "epochs": step * BATCH * SEQ / corpus.train.size,
            "final_loss": last_ce, "minutes": seconds / 60, "tokens_per_s": step * BATCH * SEQ / seconds,
            "batch": [BATCH, SEQ], "lr_peak": LR_PEAK, "lr_final": LR_PEAK * LR_FINAL, "warmup": WARMUP,
            "weight_decay": WEIGHT_DECAY, "betas": list(BETAS), "grad_clip": GRAD_CLIP,
            "router_aux_loss_coef": DEMO_CONFIG["router_aux_loss_coef"]}


# --------------------------------------------------------------------------------------
# Export and evaluation
# --------------------------------------------------------------------------------------

def stream_ppl(model, windows, C):
    """Perplexity of windows [n, SEQ] (each window from its own start, SEQ-1 predictions)."""
    torch = C.torch
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, windows.shape[0], EVAL_BATCH):
            x = windows[i:i + EVAL_BATCH]
            logits = model(input_ids=x, use_cache=False).logits[:, :-1].flatten(0, 1).float()
            nll += float(torch.nn.functional.cross_entropy(logits, x[:, 1:].flatten(), reduction="sum"))
            count += x[:, 1:].numel()
    return math.exp(nll / count)


def unigram_ppl(counts, windows):
    """Perplexity of the same predicted tokens as stream_ppl under the training unigram
    distribution, add-one smoothed over the vocabulary."""
    p = (counts + 1) / (counts.sum() + counts.size)
    return float(np.exp(-np.log(p[windows[:, 1:].ravel()]).mean()))


def param_counts(params):
    cfg = DEMO_CONFIG
    total = sum(p.numel() for p in params.values())
    routed = sum(p.numel() for n, p in params.items() if n.endswith(("experts.gate_up_proj", "experts.down_proj")))
    unused = routed * (cfg["num_experts"] - cfg["num_experts_per_tok"]) // cfg["num_experts"]
    embed = params["model.embed_tokens.weight"].numel()
    return {"total": total, "routed_experts": routed, "active_per_token": total - unused,
            "embedding": embed, "active_per_token_without_embedding": total - unused - embed}


def write_checkpoints(params, out_dir, hf_dir, log):
    """HF bf16 checkpoint into hf_dir and the MLX 4-bit one into out_dir; checks the MLX file
    (read back, every matrix quantised, size). Returns (byte counts, the dequantised values)."""
    hf_bytes = write_hf(hf_dir, DEMO_CONFIG, hf_layout_tensors(params, fused=True, add_visual=False))
    tensors, ref_vals, overrides, qlog = mlx_layout(params)
    write_mlx(out_dir, DEMO_CONFIG, tensors, overrides)
    path = os.path.join(out_dir, "model.safetensors")
    back = load_safetensors_np(path)
    if set(back) != set(tensors) or not all(np.array_equal(back[k][1], tensors[k][1]) for k in back):
        raise RuntimeError(f"{path} does not read back identical")
    plain = [q[0] for q in qlog if q[1] == 0]
    if plain:
        raise RuntimeError(f"matrices left unquantised (input dim not a multiple of 64): {plain}")
    size = os.path.getsize(path)
    if size > MLX_LIMIT_BYTES:
        raise RuntimeError(f"{path}: {size} bytes > {MLX_LIMIT_BYTES}")
    err4 = max(q[2] for q in qlog if q[1] == 4)
    log(f"checkpoints: mlx4 {size} bytes ({len(tensors)} tensors, max rel. 4-bit error {err4:.3f}), "
        f"hf bf16 {hf_bytes} bytes in {hf_dir}")
    return {"mlx4_bytes": size, "mlx4_limit_bytes": MLX_LIMIT_BYTES, "hf_bf16_bytes": hf_bytes}, ref_vals


def eval_text_reference(m32, m16, ids, C):
    """HF fp32 and bf16 teacher-forced logits of the eval text (one forward each). Returns the
    compact reference [n, 1 + 2K] float32 (logsumexp, top-K ids, top-K logits of the fp32
    logits) and the statistics of the text."""
    torch = C.torch
    x = torch.tensor([ids], device=C.device)
    l32, l16 = logits_of(m32, x, C), logits_of(m16, x, C)  # [n, vocab] float32
    top_logits, top_ids = l32.topk(REF_TOP_K, dim=-1)  # descending by logit
    ref = torch.cat([torch.logsumexp(l32, -1, keepdim=True), top_ids.float(), top_logits], 1)
    lp32, lp16 = l32.log_softmax(-1), l16.log_softmax(-1)
    tgt = x[0, 1:, None]
    nll32 = -lp32[:-1].gather(1, tgt)[:, 0]  # [n-1] nats
    nll16 = -lp16[:-1].gather(1, tgt)[:, 0]
    kl = (lp32.exp() * (lp32 - lp16)).sum(-1)  # KL(fp32 || bf16) per position
    stats = {"tokens": len(ids), "ppl_fp32": math.exp(float(nll32.mean())),
             "ppl_bf16": math.exp(float(nll16.mean())),
             # contexts of 1..511 tokens (as in training) / of 512 tokens and more
             "ppl_fp32_context_below_512": math.exp(float(nll32[:SEQ - 1].mean())),
             "ppl_fp32_context_512_up": math.exp(float(nll32[SEQ - 1:].mean())),
             "top1_agreement_bf16_vs_fp32": float((l32.argmax(-1) == l16.argmax(-1)).float().mean()),
             "mean_kl_fp32_to_bf16_nats": float(kl.mean())}
    return ref.cpu().numpy().astype("<f4"), stats


def sample_answers(model, C, tok, tokenizer_dir, chats, max_new):
    """Greedy answers to the held-out questions, prompted through the tokenizer_config chat
    template (thinking off), stopping at <|im_end|>."""
    torch = C.torch
    hf_tok = C.transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    im_end, eot = tok.token_to_id(IM_END), tok.token_to_id(EOT)
    samples = []
    for conv, question, reference in chats:
        prompt = hf_tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                            add_generation_prompt=True, enable_thinking=False)
        ids = tok.encode(prompt, add_special_tokens=False).ids
        x = torch.tensor([ids], device=C.device)
        with torch.no_grad():
            seq = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                                 do_sample=False, num_beams=1, eos_token_id=im_end, pad_token_id=eot)
        new = seq[0, len(ids):].tolist()
        answer = new[:new.index(im_end)] if im_end in new else new
        samples.append({"question": question, "answer": tok.decode(answer), "reference": reference,
                        "stopped_at_im_end": im_end in new, "prompt_ids": ids, "answer_ids": new,
                        "prompt_matches_training_render": conv.startswith(prompt)})
    return samples


def export_and_evaluate(model, corpus, C, tok, args, out_dir, hf_dir, train_stats, quick, log):
    """Rounds the weights to bf16, writes both checkpoints, then, on the model with the
    dequantised MLX weights (what orchid runs; eager attention and experts, as make_golden):
    held-out perplexities, heldout-eval.txt and its reference, samples, results.json.
    quick (the dry run): 16 held-out windows and 2 short samples."""
    torch = C.torch
    t0 = time.time()
    model.eval()
    set_impls(model, C, log)
    params = canon_params(model, text_model_of(model))
    with torch.no_grad():  # the unquantised model is the bf16 checkpoint (A_log stays F32)
        for name, p in params.items():
            if not name.endswith("A_log"):
                p.copy_(p.bfloat16().float())
    ckpt, ref_vals = write_checkpoints(params, out_dir, hf_dir, log)
    deq32, _ = dequantized_copy(model, ref_vals, C)
    deq16, _ = to_bf16_like_from_pretrained(deq32, C)
    unq16, _ = to_bf16_like_from_pretrained(model, C)

    windows = corpus.heldout[:16] if quick else corpus.heldout
    w = torch.from_numpy(windows).to(C.device)
    ppl = {"mlx4_fp32": stream_ppl(deq32, w, C), "mlx4_bf16": stream_ppl(deq16, w, C),
           "unquantised_bf16": stream_ppl(unq16, w, C)}
    uni = unigram_ppl(corpus.unigram_counts, windows)
    heldout = {"windows": len(windows), "window_tokens": SEQ, "predicted_tokens": len(windows) * (SEQ - 1),
               "ppl": ppl, "unigram_ppl": uni, "ratio_mlx4_fp32_to_unigram": ppl["mlx4_fp32"] / uni,
               "bar_ratio_at_most_one_third": ppl["mlx4_fp32"] <= uni / 3,
               "quantisation_cost_bf16_ppl_ratio": ppl["mlx4_bf16"] / ppl["unquantised_bf16"]}
    log(f"held-out stream: {heldout}")

    text_path = Path(out_dir) / "heldout-eval.txt"
    text_path.write_bytes(corpus.eval_text.encode("utf-8"))
    if tok.encode(text_path.read_bytes().decode("utf-8"), add_special_tokens=False).ids != corpus.eval_ids:
        raise RuntimeError(f"{text_path} does not tokenise to the evaluated ids")
    ref, text_stats = eval_text_reference(deq32, deq16, corpus.eval_ids, C)
    np.save(Path(out_dir) / "heldout-eval.ref.npy", ref)
    log(f"heldout-eval.txt: {text_stats}")

    chats = corpus.chats[:2] if quick else corpus.chats
    samples = sample_answers(deq32, C, tok, args.tokenizer, chats, 8 if quick else SAMPLE_MAX_NEW)
    for s in samples:
        log(f"Q: {s['question']}\nA: {s['answer']!r}\nreference: {s['reference']}")

    results = {
        "config": DEMO_CONFIG, "seed": args.seed, "params": param_counts(params), "checkpoint": ckpt,
        "data": corpus.stats, "training": train_stats, "heldout_stream": heldout, "heldout_eval": text_stats,
        "heldout_eval_reference": {
            "file": "heldout-eval.ref.npy", "shape": list(ref.shape), "dtype": "float32",
            "columns": f"0: logsumexp of the fp32 logits row; 1..{REF_TOP_K}: the top-{REF_TOP_K} token "
                       f"ids (exact in float32), descending by logit; {REF_TOP_K + 1}..{2 * REF_TOP_K}: "
                       "their fp32 logits",
            "model": "HF fp32 on the dequantised mlx4 weights, eager attention and experts, TF32 off, "
                     "one forward of the whole text (chunked DeltaNet, C = 64)"},
        "samples": {"model": "HF fp32 on the dequantised mlx4 weights, greedy", "max_new_tokens":
                    8 if quick else SAMPLE_MAX_NEW, "answers": samples},
        "versions": {"torch": C.torch.__version__, "transformers": C.transformers.__version__,
                     "tokenizers": sys.modules["tokenizers"].__version__,
                     "gpu": torch.cuda.get_device_name()},
        "export_seconds": time.time() - t0,
    }
    (Path(out_dir) / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    log(f"export + evaluation: {time.time() - t0:.0f} s")
    return results


def check_outputs(out_dir, expected):
    """The device tool returns at most 8 files, each under 16 MiB."""
    names = set(os.listdir(out_dir))
    if names != expected:
        raise RuntimeError(f"{out_dir} holds {sorted(names)}, expected {sorted(expected)}")
    big = [n for n in names if os.path.getsize(os.path.join(out_dir, n)) >= FILE_LIMIT_BYTES]
    if big:
        raise RuntimeError(f"files of 16 MiB or more: {big}")


# --------------------------------------------------------------------------------------

def run(args, log):
    t0 = time.time()
    selftest_quant()
    C = hf_context("cuda")
    if not C.torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    log(f"torch {C.torch.__version__}, transformers {C.transformers.__version__}, "
        f"{C.torch.cuda.get_device_name()}")
    tok = Tokenizer.from_file(str(args.tokenizer / "tokenizer.json"))
    if tok.get_vocab_size() != DEMO_CONFIG["vocab_size"]:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} ids, the config {DEMO_CONFIG['vocab_size']}")
    corpus = load_corpus(args.corpus, tok, args.seed, log)
    scratch = Path(tempfile.mkdtemp(prefix="orchid-demo-model-"))

    log(f"== dry run ({time.time() - t0:.0f} s)")
    dry = build(C, scratch / "config", args.seed, log)
    dry_stats = train(dry, corpus, C, log, args.seed, steps=2)
    (scratch / "dry-out").mkdir()
    export_and_evaluate(dry, corpus, C, tok, args, scratch / "dry-out", scratch / "dry-hf", dry_stats, True, log)
    check_outputs(scratch / "dry-out", OUTPUT_FILES - {"train.log"})
    del dry
    C.torch.cuda.empty_cache()

    setup_seconds = time.time() - t0
    log(f"== training, {args.minutes} min ({setup_seconds:.0f} s)")
    model = build(C, scratch / "config", args.seed, log)
    stats = train(model, corpus, C, log, args.seed, minutes=args.minutes)
    stats["seconds_before_training"] = setup_seconds  # imports, tokenising, dry run
    log(f"training: {stats}")

    log(f"== export + evaluation ({time.time() - t0:.0f} s)")
    export_and_evaluate(model, corpus, C, tok, args, args.out, scratch / "hf", stats, False, log)
    check_outputs(args.out, OUTPUT_FILES)
    log(f"done in {time.time() - t0:.0f} s; outputs in {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path, help="make_corpus.py's output")
    ap.add_argument("--tokenizer", required=True, type=Path,
                    help="folder with tokenizer.json and tokenizer_config.json (chat template)")
    ap.add_argument("--out", required=True, type=Path, help="empty or new folder for the outputs")
    ap.add_argument("--minutes", type=float, default=6.0, help="training wall clock")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        sys.exit(f"{args.out} is not empty")
    log = Log(args.out / "train.log")
    try:
        run(args, log)
    except Exception:  # noqa: BLE001 - any failure ends the run at once, logged
        log(traceback.format_exc())
        sys.exit(1)


if __name__ == "__main__":
    main()
