#!/usr/bin/env python3
"""Trains the evaluation model (issue 12) in one time-boxed GPU run.

  PYTHONUNBUFFERED=1 python3 tools/evalmodel/train.py --data .gpu-bundle/evalmodel \
      --budget-s 150 --out "$OUT" 2>&1 | tee "$OUT/train.log"
  python3 tools/evalmodel/train.py --data .gpu-bundle/evalmodel --out /tmp/x --dry-run  # CPU

Model: transformers' LlamaForCausalLM (16 layers, hidden 256, 4 query heads x 64, 2 KV heads,
MLP 320, tied embeddings, vocab 2048, RoPE theta 500000, max_position_embeddings 16384),
7.61 M parameters: 15.2 MB in fp16, one safetensors file under the 16 MiB a file the GPU
machine returns. SDPA attention, bf16 autocast, fused AdamW, no
torch.compile. Data: synth.py sequences generated on the fly by worker processes from
pieces.json + natural.u16 (prepare.py); sequence length grows with elapsed time (--phases).
LR: linear warm-up then cosine, on elapsed time. The whole run, imports included, ends by
--budget-s.

Writes into --out (each checkpoint is complete: weights then config, both written to a temp
name and renamed):
  model.safetensors  fp16 weights, HF names (lm_head omitted: tied), every --save-every s
  config.json        HF LlamaConfig (+ rope_theta at the top level for older readers)
  metrics.json       loss / held-out retrieval history, throughput, the final summary
  check.json         fixed ids, per-position argmax / top-1 / runner-up logits of the saved fp16
                     weights run in fp32 (compare with `strata logits`), retrieval rows
(train.log comes from the tee in the command line.)
"""
import argparse
import array
import json
import math
import os
import queue
import sys
import time
import traceback

T0 = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import synth  # noqa: E402


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def fatal(msg, code=2):
    log("FATAL: " + msg)
    sys.exit(code)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with pieces.json and natural.u16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0,
                    help="wall-clock seconds for this run of the script, imports included")
    ap.add_argument("--total-s", type=float, default=0.0,
                    help="training seconds of the whole schedule, over every resumed run "
                         "(LR and sequence-length phases follow it); 0: this run's budget")
    ap.add_argument("--state", default="",
                    help="folder for the full resumable state (model, optimizer, schedule "
                         "position): resumed from when it holds state.pt, saved every "
                         "--state-every s and at the end")
    ap.add_argument("--state-every", type=float, default=90.0)
    ap.add_argument("--init", default="",
                    help="folder with a model.safetensors (+ trainstate.json) of an earlier run: "
                         "the weights are loaded, the optimizer starts afresh with --rewarmup-s "
                         "of warm-up, the schedule goes on from trainstate.json")
    ap.add_argument("--rewarmup-s", type=float, default=20.0)
    ap.add_argument("--answer-weight", type=float, default=5.0,
                    help="loss weight of answer tokens (the rest weigh 1)")
    ap.add_argument("--eval-cases", type=int, default=16, help="held-out cases per context")
    ap.add_argument("--reserve-s", type=float, default=12.0,
                    help="seconds kept at the end for the final save and check.json")
    ap.add_argument("--dry-run", action="store_true", help="2 tiny steps on the CPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-frac", type=float, default=0.03)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--phases", default="0.1:512,0.22:1024,0.38:2048,0.6:4096,1.0:8320",
                    help="FRACTION:SEQLEN,...: sequence length until that fraction of the "
                         "training time")
    ap.add_argument("--save-every", type=float, default=20.0)
    ap.add_argument("--log-every", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=0, help="data worker processes (0: auto)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=320)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--max-pos", type=int, default=16384)
    return ap.parse_args()


# ---- data workers (pure Python; forked before CUDA is initialised) ----------------------------
_W = {}


def _worker_init(data_dir, seed):
    meta = json.load(open(os.path.join(data_dir, "pieces.json")))
    natural = load_natural(data_dir)
    _W["S"] = synth.Synth(meta["pieces"], natural, meta["eos_id"], seed=seed)


def _worker_loop(data_dir, seed, tasks, results):
    try:
        try:
            os.nice(5)  # the training process (kernel launches) goes first
        except OSError:
            pass
        _worker_init(data_dir, seed)
        S = _W["S"]
        while True:
            task = tasks.get()
            if task is None:
                return
            n, b = task
            results.put((n, b) + sample_batch(S, n, b))
    except Exception:  # the parent falls back to in-process generation
        results.put(("error", traceback.format_exc()))


def sample_batch(S, n, b):
    """b sequences of n + 1 ids: (uint16 ids bytes, uint8 answer-mask bytes)."""
    buf = array.array("H")
    msk = bytearray()
    for _ in range(b):
        ids, mask = S.sample(n + 1)
        buf.extend(ids)
        msk.extend(mask)
    return buf.tobytes(), bytes(msk)


def load_natural(data_dir, name="natural.u16"):
    natural = array.array("H")
    path = os.path.join(data_dir, name)
    if os.path.exists(path):
        with open(path, "rb") as f:
            natural.frombytes(f.read())
        if sys.byteorder != "little":
            natural.byteswap()
    return natural


class Batches:
    """Batches of B sequences of n+1 ids from worker processes, or in-process as a fallback."""

    def __init__(self, data_dir, seed, workers, meta, natural):
        self.local = synth.Synth(meta["pieces"], natural, meta["eos_id"], seed=seed + 1000)
        self.procs = []
        self.pending = 0
        self.ok = False
        if workers <= 0:
            return
        try:
            import multiprocessing as mp
            ctx = mp.get_context("fork")
            self.tasks = ctx.Queue()
            self.results = ctx.Queue()
            for w in range(workers):
                p = ctx.Process(target=_worker_loop,
                                args=(data_dir, seed * 100 + w + 1, self.tasks, self.results),
                                daemon=True)
                p.start()
                self.procs.append(p)
            self.ok = True
        except Exception as e:
            log(f"data workers unavailable ({e!r}); generating in-process")

    def prefetch(self, n, b, depth):
        while self.ok and self.pending < depth:
            self.tasks.put((n, b))
            self.pending += 1

    def get(self, n, b, depth):
        """(n', b', ids bytes, mask bytes) of b' x (n' + 1); n', b' may be a previous phase's."""
        if self.ok:
            self.prefetch(n, b, depth)
            try:
                got = self.results.get(timeout=60)
                self.pending -= 1
                if got[0] == "error":
                    raise RuntimeError(got[1])
                return got
            except Exception as e:
                log(f"data workers failed ({str(e)[-300:]!r}); generating in-process")
                self.ok = False
        return (n, b) + sample_batch(self.local, n, b)

    def close(self):
        if self.ok:
            try:
                self.tasks.cancel_join_thread()
                self.results.cancel_join_thread()
            except Exception:
                pass
        for p in self.procs:
            try:
                p.terminate()
            except Exception:
                pass


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    meta_path = os.path.join(a.data, "pieces.json")
    if not os.path.exists(meta_path):
        fatal(f"{meta_path} missing: run tools/evalmodel/prepare.py (and carry .gpu-bundle)")
    meta = json.load(open(meta_path))
    natural = load_natural(a.data)
    log(f"data: {len(natural)} natural-text tokens, {len(meta['pieces'])} pieces, "
        f"vocab {meta['vocab_size']}")
    if len(natural) < 100000 and not a.dry_run:
        fatal("natural.u16 missing or too small")

    phases = []
    for part in a.phases.split(","):
        f, n = part.split(":")
        phases.append((float(f), int(n)))
    if a.dry_run:
        phases = [(1.0, 128)]
        a.tokens_per_step = 256
        a.log_every = a.save_every = 0.0

    # Worker processes fork before torch touches CUDA.
    try:
        cpus = len(os.sched_getaffinity(0))
    except Exception:
        cpus = os.cpu_count() or 4
    workers = a.workers or (0 if a.dry_run else max(2, min(12, cpus - 3)))
    batches = Batches(a.data, a.seed, workers, meta, natural)
    log(f"data workers: {len(batches.procs)}")

    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception as e:
        fatal(f"import failed: {e!r}")
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"cuda {torch.cuda.is_available()}")
    if a.dry_run:
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            fatal("CUDA is not available (use --dry-run for the CPU path)")
        device = torch.device("cuda")
        try:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        except Exception:
            pass
    torch.manual_seed(a.seed)
    use_amp = device.type == "cuda"

    # ---- model ---------------------------------------------------------------------------
    V = int(meta["vocab_size"])
    common = dict(vocab_size=V, hidden_size=a.hidden, intermediate_size=a.intermediate,
                  num_hidden_layers=a.layers, num_attention_heads=a.heads,
                  num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
                  max_position_embeddings=a.max_pos, rms_norm_eps=1e-5,
                  tie_word_embeddings=True, hidden_act="silu", initializer_range=0.02,
                  attention_bias=False, mlp_bias=False, use_cache=False,
                  bos_token_id=meta["bos_id"], eos_token_id=meta["eos_id"],
                  pad_token_id=meta["pad_id"])
    cfg = None
    for extra in ({"rope_parameters": {"rope_type": "default", "rope_theta": a.rope_theta}},
                  {"rope_theta": a.rope_theta}):
        try:
            cfg = LlamaConfig(**common, **extra)
            break
        except Exception as e:
            log(f"LlamaConfig({list(extra)[0]}=...) refused: {e!r}")
    if cfg is None:
        fatal("could not build a LlamaConfig")
    try:
        cfg._attn_implementation = "sdpa"
    except Exception as e:
        log(f"could not set sdpa on the config: {e!r}")
    try:
        model = LlamaForCausalLM(cfg)
    except Exception as e:
        fatal(f"LlamaForCausalLM(config) failed: {e!r}")
    if not getattr(cfg, "tie_word_embeddings", False) or \
            model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        try:
            model.tie_weights()
        except Exception:
            pass
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        log("lm_head not tied after tie_weights(); tying by hand")
        model.lm_head.weight = model.model.embed_tokens.weight
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if not tied:
        fatal("lm_head is not tied to embed_tokens")
    # RoPE: make sure the module uses exactly theta = --rope-theta (the value config.json says).
    rot = getattr(model.model, "rotary_emb", None)
    want = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2, dtype=torch.float64) / a.head_dim))
    if rot is None or not hasattr(rot, "inv_freq"):
        fatal("no model.model.rotary_emb.inv_freq: unexpected transformers Llama layout")
    have = rot.inv_freq.detach().double().cpu()
    if have.shape != want.shape or float(((have - want).abs() / want).max()) > 1e-5:
        log(f"RoPE inv_freq does not match theta {a.rope_theta}; overwriting the buffer")
        rot.inv_freq = want.float()
        if hasattr(rot, "original_inv_freq"):
            rot.original_inv_freq = want.float()
    if float(getattr(rot, "attention_scaling", 1.0)) != 1.0:
        fatal(f"RoPE attention_scaling {rot.attention_scaling} != 1 (not default RoPE)")
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.3f} M parameters ({n_params * 2 / 1e6:.2f} MB fp16), "
        f"attn {getattr(cfg, '_attn_implementation', '?')}")
    if n_params * 2 > 16 * 2**20 - 65536:
        log("WARNING: the fp16 weights exceed 16 MiB: the GPU machine will not return the file")

    try:
        cfg_dict = json.loads(json.dumps(cfg.to_dict(), default=str))
    except Exception as e:
        log(f"config.to_dict failed ({e!r}); writing the config from the arguments")
        cfg_dict = dict(common)
    cfg_dict["architectures"] = ["LlamaForCausalLM"]
    cfg_dict["model_type"] = "llama"
    cfg_dict["rope_theta"] = a.rope_theta
    cfg_dict["rope_scaling"] = None
    cfg_dict["rope_parameters"] = {"rope_type": "default", "rope_theta": a.rope_theta}
    cfg_dict["torch_dtype"] = "float16"
    cfg_dict["dtype"] = "float16"
    cfg_dict["tie_word_embeddings"] = True
    cfg_dict["use_cache"] = True
    for k in ("_attn_implementation", "_attn_implementation_autoset"):
        cfg_dict.pop(k, None)

    def write_atomic(path, data_bytes):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data_bytes)
        os.replace(tmp, path)

    write_atomic(os.path.join(a.out, "config.json"),
                 json.dumps(cfg_dict, indent=2, sort_keys=True).encode())

    try:
        from safetensors.torch import save_file
    except Exception as e:
        save_file = None
        log(f"safetensors.torch unavailable ({e!r}); writing safetensors by hand")

    def save_checkpoint(tag):
        t = time.time()
        sd = {}
        for k, v in model.state_dict().items():
            if k == "lm_head.weight" or not k.endswith(".weight"):
                continue
            sd[k] = v.detach().to(torch.float16).cpu().contiguous()
        path = os.path.join(a.out, "model.safetensors")
        tmp = path + ".tmp"
        if save_file is not None:
            save_file(sd, tmp, metadata={"format": "pt"})
        else:
            header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
            for k in sorted(sd):
                b = sd[k].view(torch.int16).numpy().tobytes()
                header[k] = {"dtype": "F16", "shape": list(sd[k].shape),
                             "data_offsets": [off, off + len(b)]}
                blobs.append(b)
                off += len(b)
            h = json.dumps(header).encode()
            h += b" " * ((8 - len(h) % 8) % 8)
            with open(tmp, "wb") as f:
                f.write(len(h).to_bytes(8, "little"))
                f.write(h)
                for b in blobs:
                    f.write(b)
        os.replace(tmp, path)
        log(f"checkpoint ({tag}): {os.path.getsize(path)} bytes in {time.time() - t:.2f} s")

    # ---- optimiser -----------------------------------------------------------------------
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "embed" not in name else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": a.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    opt = None
    if device.type == "cuda":
        try:
            opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        except Exception as e:
            log(f"fused AdamW refused ({e!r}); plain AdamW")
    if opt is None:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    # ---- held-out retrieval check (quality.cpp's format; its own seed) --------------------
    eval_filler = load_natural(a.data, "eval_filler.u16")
    heldout = synth.Synth(meta["pieces"], natural, meta["eos_id"], seed=424242,
                          eval_filler=eval_filler)
    log(f"held-out check: {len(heldout.heldout_names)} held-out names, "
        f"{len(eval_filler)} filler tokens, {a.eval_cases} cases per context")
    eval_sets = []
    contexts = [160] if a.dry_run else [2048, 4096, 8192]
    ne = 4 if a.dry_run else a.eval_cases
    for ctx in contexts:
        cases = [heldout.eval_case(ctx, (i + 0.5) / ne, paraphrase=i % 2 == 1)
                 for i in range(ne)]
        width = max(len(ids) for ids, _ in cases)
        x = np.full((len(cases), width), meta["pad_id"], dtype=np.int64)
        for i, (ids, _) in enumerate(cases):
            x[i, :len(ids)] = ids
        eval_sets.append((ctx, torch.from_numpy(x).to(device), cases))

    def heldout_eval():
        model.eval()
        res = {}
        with torch.no_grad():
            for ctx, x, cases in eval_sets:
                ams = []
                for c0 in range(0, x.shape[0], 8):
                    with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                                        enabled=use_amp):
                        logits = model(input_ids=x[c0:c0 + 8], use_cache=False).logits
                    ams.append(logits.argmax(-1).cpu().numpy())
                    del logits
                am = np.concatenate(ams)
                exact = digits = total = 0
                for i, (ids, rows) in enumerate(cases):
                    ok = [int(am[i, r]) == ids[r + 1] for r in rows]
                    exact += all(ok)
                    digits += sum(ok[1:])
                    total += len(ok) - 1
                res[str(ctx)] = {"exact": exact / len(cases), "digit_acc": digits / max(1, total)}
        model.train()
        return res

    # ---- training loop -------------------------------------------------------------------
    def lr_at(frac):
        if frac < a.warmup_frac:
            return a.lr * max(frac, 1e-3) / a.warmup_frac
        p = min(1.0, (frac - a.warmup_frac) / max(1e-9, 1 - a.warmup_frac))
        lo = a.lr * a.min_lr_frac
        return lo + (a.lr - lo) * 0.5 * (1 + math.cos(math.pi * p))

    def phase_len(frac):
        for f, n in phases:
            if frac < f:
                return n
        return phases[-1][1]

    metrics = {"config": {k: v for k, v in vars(a).items()}, "params": n_params, "log": []}

    def write_metrics():
        write_atomic(os.path.join(a.out, "metrics.json"),
                     json.dumps(metrics, indent=1).encode())

    # ---- resume: the full state (same machine) or the weights of an earlier run -----------
    sched = {"elapsed": 0.0, "step": 0, "tokens": 0, "runs": 0}
    rewarm_until = -1.0
    state_path = os.path.join(a.state, "state.pt") if a.state else ""
    if state_path and os.path.exists(state_path):
        st = torch.load(state_path, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        sched = st["sched"]
        metrics["log"] = st.get("log", [])
        log(f"resumed the full state from {state_path}: step {sched['step']}, "
            f"{sched['elapsed']:.0f} s trained, {sched['tokens'] / 1e6:.0f} M tokens")
    elif a.init:
        from safetensors.torch import load_file
        w = load_file(os.path.join(a.init, "model.safetensors"))
        sd = model.state_dict()
        missing = [k for k in sd if k != "lm_head.weight" and k.endswith(".weight") and k not in w]
        if missing:
            fatal(f"--init {a.init}: missing {missing[:3]}")
        with torch.no_grad():
            for k, v in w.items():
                sd[k].copy_(v.to(sd[k].dtype))
        ts = os.path.join(a.init, "trainstate.json")
        if os.path.exists(ts):
            sched = json.load(open(ts))["sched"]
        rewarm_until = sched["elapsed"] + a.rewarmup_s
        log(f"initialised from {a.init} (fp16 weights; optimizer afresh, {a.rewarmup_s:.0f} s "
            f"warm-up): step {sched['step']}, {sched['elapsed']:.0f} s trained")
    sched["runs"] += 1

    def save_state(tag):
        if not state_path:
            return
        t = time.time()
        os.makedirs(a.state, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": dict(sched),
                    "log": metrics["log"]}, state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
        log(f"state ({tag}) -> {state_path} in {time.time() - t:.2f} s")

    def write_trainstate():
        write_atomic(os.path.join(a.out, "trainstate.json"),
                     json.dumps({"sched": sched, "args": vars(a)}, indent=1).encode())

    train_start = time.time()
    train_budget = a.budget_s - (train_start - T0) - a.reserve_s
    if not a.dry_run and train_budget < 20:
        fatal(f"only {train_budget:.0f} s left for training after setup")
    total = a.total_s if a.total_s > 0 else sched["elapsed"] + train_budget
    elapsed0 = sched["elapsed"]
    if not a.dry_run and elapsed0 >= total:
        fatal(f"the schedule is complete ({elapsed0:.0f} of {total:.0f} s)")
    log(f"training for {train_budget:.0f} s of {total:.0f} s in all, from {elapsed0:.0f} s "
        f"(phases {phases}, {a.tokens_per_step} tokens/step, peak lr {a.lr}, answer weight "
        f"{a.answer_weight})")
    model.train()
    step = start_step = sched["step"]
    tokens = sched["tokens"]
    loss_sum = torch.zeros((), device=device)
    ans_sum = torch.zeros((), device=device)
    loss_n = 0
    last_log = last_save = last_state = time.time()
    last_tokens = tokens
    depth = max(4, len(batches.procs))
    diverged = False
    try:
        while True:
            now = time.time()
            sched["elapsed"] = elapsed0 + (now - train_start)
            frac = sched["elapsed"] / total
            if a.dry_run and step - start_step >= 2:
                break
            if not a.dry_run and (now - train_start >= train_budget or frac >= 1.0):
                break
            n = phase_len(frac)
            b = max(1, round(a.tokens_per_step / n))
            n_got, b_got, raw, raw_mask = batches.get(n, b, depth)
            arr = np.frombuffer(raw, dtype=np.uint16).reshape(b_got, n_got + 1).astype(np.int64)
            msk = np.frombuffer(raw_mask, dtype=np.uint8).reshape(b_got, n_got + 1)
            x = torch.from_numpy(arr)
            wt = torch.from_numpy(1.0 + (a.answer_weight - 1.0) * msk[:, 1:].astype(np.float32))
            if device.type == "cuda":
                x = x.pin_memory().to(device, non_blocking=True)
                wt = wt.pin_memory().to(device, non_blocking=True)
            lr = lr_at(min(frac, 1.0))
            if sched["elapsed"] < rewarm_until:
                lr *= max(0.02, 1.0 - (rewarm_until - sched["elapsed"]) / a.rewarmup_s)
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_amp):
                logits = model(input_ids=x[:, :-1], use_cache=False).logits
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                 x[:, 1:].reshape(-1), reduction="none").view_as(wt)
            loss = (ce * wt).sum() / wt.sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            del logits
            with torch.no_grad():
                am = (wt > 1).float()
                ans_sum += (ce.detach() * am).sum() / am.sum().clamp(min=1)
                loss_sum += (ce.detach().sum() / ce.numel())
            loss_n += 1
            step += 1
            tokens += b_got * n_got
            sched["step"], sched["tokens"] = step, tokens
            now = time.time()
            if a.dry_run or now - last_log >= a.log_every:
                lv = float(loss_sum.item()) / max(1, loss_n)
                av = float(ans_sum.item()) / max(1, loss_n)
                if not math.isfinite(lv):
                    log(f"loss is {lv} at step {step}: stopping (last checkpoint kept)")
                    diverged = True
                    break
                tps = (tokens - last_tokens) / max(1e-9, now - last_log)
                ev = heldout_eval()
                entry = {"t": round(now - T0, 1), "elapsed": round(sched["elapsed"], 1),
                         "step": step, "tokens": tokens, "seq": n_got, "lr": lr,
                         "loss": round(lv, 4), "answer_loss": round(av, 4),
                         "tok_per_s": round(tps), "retrieval": ev}
                metrics["log"].append(entry)
                write_metrics()
                log(f"[{sched['elapsed']:.0f}s] step {step} seq {n_got}x{b_got} lr {lr:.2e} "
                    f"loss {lv:.3f} answer {av:.3f} {tps / 1e3:.0f}k tok/s | exact "
                    + " ".join(f"{k}:{v['exact']:.2f}(d {v['digit_acc']:.2f})"
                               for k, v in ev.items()))
                loss_sum.zero_()
                ans_sum.zero_()
                loss_n = 0
                last_log = time.time()
                last_tokens = tokens
            if not a.dry_run and now - last_save >= a.save_every:
                if not bool(torch.isfinite(loss.detach()).item()):
                    log(f"loss is not finite at step {step}: stopping (last checkpoint kept)")
                    diverged = True
                    break
                save_checkpoint(f"step {step}")
                write_trainstate()
                last_save = time.time()
            if not a.dry_run and now - last_state >= a.state_every:
                save_state(f"step {step}")
                last_state = time.time()
    except Exception:
        log("training stopped by an error (saving what there is):\n" + traceback.format_exc())
        metrics["error"] = traceback.format_exc()[-2000:]
    finally:
        batches.close()

    # ---- final save, summary and check.json ----------------------------------------------
    if diverged:
        metrics["diverged_at_step"] = step
        write_metrics()
        log("diverged: the last saved checkpoint stays; no final save, no check.json")
        return
    save_checkpoint(f"final, step {step}")
    write_trainstate()
    save_state("final")
    ev = heldout_eval()
    metrics["final"] = {"step": step, "tokens": tokens, "train_s": round(time.time() - train_start, 1),
                        "retrieval": ev}
    write_metrics()
    log(f"final: {step} steps, {tokens / 1e6:.1f} M tokens, retrieval "
        + " ".join(f"{k}:{v['exact']:.2f}" for k, v in ev.items()))

    # check.json: the saved fp16 weights, run in fp32, on a fixed sequence.
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.float16).float())
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        except Exception:
            pass
        model.eval()
        ck = synth.Synth(meta["pieces"], natural, meta["eos_id"], seed=777)
        ids, rows = ck.eval_case(96 if a.dry_run else 1000, 0.25)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0]
            logits = logits.float()
            top2 = logits.topk(2, dim=-1)
        check = {"ids": ids, "answer_rows": rows,
                 "argmax": top2.indices[:, 0].tolist(),
                 "top1": [round(v, 5) for v in top2.values[:, 0].tolist()],
                 "top2": [round(v, 5) for v in top2.values[:, 1].tolist()],
                 "answer_correct": all(int(top2.indices[r, 0]) == ids[r + 1] for r in rows),
                 "note": "saved fp16 weights upcast to fp32, fp32 forward (TF32 off), "
                         "row i = logits after ids[0..i]"}
        write_atomic(os.path.join(a.out, "check.json"), json.dumps(check).encode())
        log(f"check.json: {len(ids)} ids, answer correct: {check['answer_correct']}")
    except Exception:
        log("check.json failed:\n" + traceback.format_exc())
    log(f"done in {time.time() - T0:.1f} s")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception:
        log("FATAL:\n" + traceback.format_exc())
        sys.exit(1)
    # No interpreter teardown (queue feeder threads, CUDA): everything is written and flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
