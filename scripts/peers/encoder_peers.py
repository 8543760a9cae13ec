#!/usr/bin/env python3
"""Side-by-side speed of the all-MiniLM-L6-v2 encoder: PyTorch, ONNX Runtime, ours.

Contenders, all float32, on --threads N threads (default 1: torch.set_num_threads, ORT's
intra-op threads, our --threads), the same synthetic token ids (attention mask all ones):
  pytorch           transformers' BertModel (no pooler, its default SDPA attention) in eager
                    mode under torch.inference_mode(), then mean pooling and L2 normalization;
  onnxruntime       the same module exported with torch.onnx.export (TorchScript exporter,
                    dynamic batch and sequence axes), ORT's default graph optimizations;
  onnxruntime-bert  that graph after onnxruntime.transformers' offline BERT optimizer
                    (EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu);
  rust              with --rust-cmd CMD: CMD --batch B --tokens T is run once a repeat and must
                    print a JSON line {"sentences_per_s": ...} as its last line of stdout.
Each repeat measures every contender once, in turn (the order rotates), so that ratios come from
the same time window; a Python repeat runs the forward pass for about --seconds. Reported: the
median sentences/s over the repeats with its min and max, GFLOP/s (see encoder_flops), and the
median over repeats of each contender's rate divided by onnxruntime's in the same repeat.

Setup: python3 -m venv "$VENV" && "$VENV/bin/pip" install -r scripts/peers/requirements.txt
Run from the repository root, with no build or other benchmark running:
       dir=$(scripts/fetch-minilm.sh)
       "$VENV/bin/python" scripts/peers/encoder_peers.py "$dir" \\
           [--rust-cmd "target/release/embed-bench $dir"] [--threads N] [--json]
"""

import os
import sys


def threads_argument(argv):
    """The value of --threads (1 without it), read before torch loads."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


THREADS = threads_argument(sys.argv)
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ[var] = THREADS  # before torch loads, and inherited by --rust-cmd
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from onnxruntime.transformers import optimizer as ort_optimizer  # noqa: E402
from transformers import BertModel  # noqa: E402
from transformers.utils import logging as transformers_logging  # noqa: E402
from peers_common import cpu_name, keep_freed_memory  # noqa: E402

REFERENCE = "onnxruntime"  # the ratio column divides by this contender


def encoder_flops(config, batch, tokens):
    """FLOPs of one forward pass over `batch` sentences of `tokens` tokens, a multiply-add as 2.

    With T = batch * tokens rows, h = hidden size, f = FFN width, per layer:
      Q, K, V and output projections   4 * 2*T*h*h
      FFN up and down                  2 * 2*T*h*f
      attention scores Q.K^T and P.V   2 * 2*tokens*tokens*h per sentence (all heads together),
                                       times batch: a sentence attends only to its own tokens
    total = layers * (2*T*(4*h*h + 2*h*f) + 4*batch*tokens*tokens*h). Embeddings, biases,
    LayerNorm, softmax, GELU and pooling are not counted: they are not matrix products.
    """
    h, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    rows = batch * tokens
    return layers * (2 * rows * (4 * h * h + 2 * h * f) + 4 * batch * tokens * tokens * h)


class SentenceEmbedding(torch.nn.Module):
    """BertModel, mean pooling over the attention mask, L2 normalization (the model's pipeline)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        x = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(x.dtype)
        x = (x * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(x, dim=-1)


def export_onnx(model_dir, workdir):
    """Paths of the model exported to ONNX and of its BERT-optimized form, both under `workdir`.

    The TorchScript exporter on eager attention gives the graph that ORT's BERT optimizer fuses
    whole (EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu); on the dynamo
    exporter's graph, or on SDPA attention, it fuses little more than BiasGelu.
    """
    plain, fused = workdir / "minilm.onnx", workdir / "minilm-bert.onnx"
    bert = BertModel.from_pretrained(str(model_dir), add_pooling_layer=False,
                                     attn_implementation="eager")
    ids = torch.full((2, 16), 1000)  # not the mask tensor itself: the exporter would merge them
    axes = {0: "batch", 1: "tokens"}
    # The exporter and the optimizer print progress on stdout and warn about the legacy exporter.
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings(action="ignore"):
        torch.onnx.export(SentenceEmbedding(bert).eval(), (ids, torch.ones_like(ids)), plain,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["sentence_embedding"], dynamo=False, opset_version=17,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "sentence_embedding": {0: "batch"}})
        optimized = ort_optimizer.optimize_model(
            str(plain), model_type="bert", opt_level=0,
            num_heads=bert.config.num_attention_heads, hidden_size=bert.config.hidden_size)
    optimized.save_model_to_file(str(fused))
    return plain, fused


def ort_session(path, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


class InProcess:
    """A Python contender: `forward()` embeds the shape's batch once."""

    def __init__(self, name, forward, batch):
        self.name, self.forward, self.batch = name, forward, batch

    def warm_up(self, seconds):
        """Runs for about a second and sets how many calls one repeat makes."""
        calls, start = 0, time.perf_counter()
        while calls < 3 or time.perf_counter() - start < 1.0:
            self.forward()
            calls += 1
        self.calls = max(1, round(seconds / ((time.perf_counter() - start) / calls)))

    def measure(self):
        start = time.perf_counter()
        for _ in range(self.calls):
            self.forward()
        return self.batch * self.calls / (time.perf_counter() - start)


class Command:
    """The Rust contender: a command line that measures itself and prints sentences/s."""

    def __init__(self, command, batch, tokens, threads):
        self.name = "rust"
        self.argv = shlex.split(command) + ["--batch", str(batch), "--tokens", str(tokens),
                                            "--threads", str(threads)]

    def warm_up(self, _seconds):
        self.measure()

    def measure(self):
        done = subprocess.run(self.argv, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            sys.exit(f"encoder_peers: {shlex.join(self.argv)} exited {done.returncode}: {last}")
        try:
            return float(json.loads(done.stdout.strip().splitlines()[-1])["sentences_per_s"])
        except (IndexError, ValueError, KeyError, TypeError):
            sys.exit(f"encoder_peers: {shlex.join(self.argv)} printed no JSON line with "
                     "sentences_per_s as its last line")


def contenders(model, sessions, batch, tokens, vocab, rust_cmd, threads):
    generator = torch.Generator().manual_seed(batch * 1000 + tokens)
    ids = torch.randint(1000, vocab, (batch, tokens), generator=generator)
    mask = torch.ones_like(ids)
    ids_np, mask_np = ids.numpy(), mask.numpy()

    def pytorch():
        with torch.inference_mode():
            return model(ids, mask)

    found = [InProcess("pytorch", pytorch, batch)]
    found += [InProcess(name, lambda run=run: run(ids_np, mask_np), batch)
              for name, run in sessions.items()]
    expected = pytorch().numpy()
    for contender in found[1:]:
        error = np.abs(contender.forward() - expected).max()
        if error > 1e-4:
            sys.exit(f"encoder_peers: {contender.name} differs from pytorch by {error:.2e} "
                     f"at {batch} x {tokens}")
    if rust_cmd:
        found.append(Command(rust_cmd, batch, tokens, threads))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path, help="directory printed by scripts/fetch-minilm.sh")
    parser.add_argument("--shapes", default="1x16,1x128,8x128", help="BATCHxTOKENS,...")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.25, help="length of a Python repeat")
    parser.add_argument("--rust-cmd", help="command run as CMD --batch B --tokens T")
    parser.add_argument("--threads", type=int, default=1, help="threads of every contender")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of the table")
    args = parser.parse_args()
    if args.threads < 1:
        sys.exit("encoder_peers: --threads must be at least 1")
    if not (args.model_dir / "model.safetensors").is_file():
        sys.exit(f"encoder_peers: no model.safetensors in {args.model_dir}")
    shapes = [tuple(map(int, shape.split("x"))) for shape in args.shapes.split(",")]

    keep_freed_memory()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    transformers_logging.set_verbosity_error()  # not the unused pooler weights' report
    transformers_logging.disable_progress_bar()
    bert = BertModel.from_pretrained(str(args.model_dir), add_pooling_layer=False)
    config, model = bert.config, SentenceEmbedding(bert).eval()
    with tempfile.TemporaryDirectory() as workdir:
        print("exporting to ONNX...", file=sys.stderr)
        plain, fused = export_onnx(args.model_dir, Path(workdir))
        sessions = {"onnxruntime": ort_session(plain, args.threads),
                    "onnxruntime-bert": ort_session(fused, args.threads)}

    cpu = cpu_name()
    if not args.json:
        print(f"all-MiniLM-L6-v2 encoder, float32, {args.threads} thread(s), {args.repeats} repeats, {cpu}; "
              f"torch {torch.__version__}, onnxruntime {ort.__version__}")
        print(f"{'batch x tokens':>14}  {'contender':<16} {'sentences/s':>11}  "
              f"{'(min - max)':<17} {'GFLOP/s':>7}  x {REFERENCE}")
    for batch, tokens in shapes:
        runners = contenders(model, sessions, batch, tokens, config.vocab_size, args.rust_cmd,
                             args.threads)
        print(f"{batch} x {tokens}: warming up...", file=sys.stderr)
        for runner in runners:
            runner.warm_up(args.seconds)
        rates = {runner.name: [] for runner in runners}
        for repeat in range(args.repeats):
            turn = repeat % len(runners)
            for runner in runners[turn:] + runners[:turn]:
                rates[runner.name].append(runner.measure())
        flops = encoder_flops(config, batch, tokens)
        for name, values in rates.items():
            median = statistics.median(values)
            ratio = statistics.median(v / r for v, r in zip(values, rates[REFERENCE]))
            row = {"bench": "encoder", "model": "all-MiniLM-L6-v2", "cpu": cpu,
                   "contender": name, "batch": batch, "tokens": tokens, "repeats": len(values),
                   "threads": args.threads,
                   "sentences_per_s": median, "min": min(values), "max": max(values),
                   "gflops": median / batch * flops / 1e9, f"ratio_to_{REFERENCE}": ratio}
            if args.json:
                print(json.dumps(row))
            else:
                print(f"{f'{batch} x {tokens}':>14}  {name:<16} {median:>11.1f}  "
                      f"({min(values):7.1f} - {max(values):7.1f}) {row['gflops']:>7.1f}  "
                      f"{ratio:.2f}")


if __name__ == "__main__":
    main()
