#!/usr/bin/env python3
"""Side-by-side single-thread speed of PyTorch and ONNX Runtime on the crate's kernels.

Each case runs the same float32 inputs through PyTorch (functional ops, torch.inference_mode())
and through ONNX Runtime (a one-to-three-node graph built with onnx.helper, default graph
optimizations, inputs and a preallocated output bound once with IOBinding). Both outputs are
checked against each other before timing. Cases (rows x columns, or as named):
  softmax        last axis                      Softmax-13
  layer_norm     last axis, gamma and beta      LayerNormalization-17
  add_layer_norm LN(x + r)                      Add + LayerNormalization
  attention      B=1, H=8, D=64, L x L, plain   scaled_dot_product_attention / Attention-23
                 and with an additive L x L mask
  gelu           erf form, 4M floats            Gelu-20
  linear         Y = gelu(X W + b), X: M x K    F.gelu(F.linear) / MatMul + Add + Gelu
Gelem/s counts elements of the output; attention counts 4*L*L*D FLOP per head (Q.K^T and P.V),
linear 2*M*K*N. Each repeat measures every peer once, in turn (the order rotates), for about
--seconds; reported are the median over repeats with its min and max, and PyTorch / ORT as the
median of the per-repeat ratios.

Setup: python3 -m venv "$VENV" && "$VENV/bin/pip" install -r scripts/peers/requirements.txt
Run, with no build or other benchmark running:
       "$VENV/bin/python" scripts/peers/kernel_peers.py [--cases softmax,linear] [--json]
"""

import os

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"  # before torch loads

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from peers_common import cpu_name, keep_freed_memory  # noqa: E402

EPS = 1e-12  # LayerNorm epsilon of the MiniLM encoder
RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def ort_peer(nodes, inputs, output_shape, weights=None):
    """ONNX Runtime on a graph of `nodes` from `inputs` (name -> array, fed at run time) and
    `weights` (name -> array, initializers) to the output "y"; returns (run, output array)."""
    weights = weights or {}
    graph = helper.make_graph(
        nodes, "case",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        [onnx.numpy_helper.from_array(a, n) for n, a in weights.items()])
    opsets = [helper.make_opsetid("", 23)]
    # The lowest IR version that carries these opsets, not the newest that onnx writes: an
    # older ONNX Runtime refuses a model whose IR version is past its own.
    model = helper.make_model(graph, opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    output = np.empty(output_shape, dtype=np.float32)
    binding = session.io_binding()
    for name, array in inputs.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_numpy(output))
    return (lambda: session.run_with_iobinding(binding)), output


def torch_peer(fn, *arrays):
    """PyTorch running fn on the arrays (shared, not copied); returns (run, output of one run)."""
    tensors = [torch.from_numpy(a) for a in arrays]

    def run():
        with torch.inference_mode():
            return fn(*tensors)
    return run, run().numpy()


def node(op, inputs, output="y", **attributes):
    return helper.make_node(op, inputs, [output], **attributes)


def softmax(rows, n):
    x = randn(rows, n)
    yield torch_peer(lambda t: torch.softmax(t, -1), x)
    yield ort_peer([node("Softmax", ["x"], axis=-1)], {"x": x}, x.shape)


def layer_norm(rows, d):
    x, gamma, beta = randn(rows, d), randn(d), randn(d)
    yield torch_peer(lambda t, g, b: F.layer_norm(t, (d,), g, b, EPS), x, gamma, beta)
    yield ort_peer([node("LayerNormalization", ["x", "g", "b"], axis=-1, epsilon=EPS)],
                   {"x": x}, x.shape, {"g": gamma, "b": beta})


def add_layer_norm(rows, d):
    x, r, gamma, beta = randn(rows, d), randn(rows, d), randn(d), randn(d)
    yield torch_peer(lambda t, s, g, b: F.layer_norm(t + s, (d,), g, b, EPS), x, r, gamma, beta)
    yield ort_peer([node("Add", ["x", "r"], "s"),
                    node("LayerNormalization", ["s", "g", "b"], axis=-1, epsilon=EPS)],
                   {"x": x, "r": r}, x.shape, {"g": gamma, "b": beta})


def attention(length, masked, heads=8, dim=64):
    q, k, v = (randn(1, heads, length, dim) for _ in range(3))
    mask = randn(length, length) if masked else None
    if masked:
        yield torch_peer(lambda *t: F.scaled_dot_product_attention(*t[:3], attn_mask=t[3]),
                         q, k, v, mask)
        yield ort_peer([node("Attention", ["q", "k", "v", "m"])],
                       {"q": q, "k": k, "v": v, "m": mask}, q.shape)
    else:
        yield torch_peer(F.scaled_dot_product_attention, q, k, v)
        yield ort_peer([node("Attention", ["q", "k", "v"])], {"q": q, "k": k, "v": v}, q.shape)


def gelu(count):
    x = randn(count)
    yield torch_peer(F.gelu, x)
    yield ort_peer([node("Gelu", ["x"])], {"x": x}, x.shape)


def linear(m, k, n):
    x, w, b = randn(m, k), randn(k, n) / np.float32(k**0.5), randn(n)
    w_t = np.ascontiguousarray(w.T)  # PyTorch's layout: N x K
    yield torch_peer(lambda t, wt, c: F.gelu(F.linear(t, wt, c)), x, w_t, b)
    yield ort_peer([node("MatMul", ["x", "w"], "xw"), node("Add", ["xw", "b"], "z"),
                    node("Gelu", ["z"])], {"x": x}, (m, n), {"w": w, "b": b})


def cases():
    """(kernel, shape, unit, amount of work, factory of the two peers, its arguments)."""
    for rows, n in [(65536, 64), (16384, 256), (1024, 4096)]:
        yield "softmax", f"{rows}x{n}", "Gelem/s", rows * n, softmax, (rows, n)
    for rows, d in [(65536, 64), (16384, 256), (4096, 1024)]:
        yield "layer_norm", f"{rows}x{d}", "Gelem/s", rows * d, layer_norm, (rows, d)
    yield "add_layer_norm", "16384x256", "Gelem/s", 16384 * 256, add_layer_norm, (16384, 256)
    for length in (128, 512, 2048):
        for masked in (False, True):
            yield ("attention", f"L={length}{' +mask' if masked else ''}", "GFLOP/s",
                   8 * 4 * length * length * 64, attention, (length, masked))
    yield "gelu", f"{1 << 22}", "Gelem/s", 1 << 22, gelu, (1 << 22,)
    for m in (16, 128, 1024):
        for k, n in [(384, 1152), (384, 384), (384, 1536), (1536, 384), (768, 3072), (3072, 768)]:
            yield "linear", f"{m}x{k}x{n}", "GFLOP/s", 2 * m * k * n, linear, (m, k, n)


def calls_per_repeat(run, seconds):
    """Warms `run` up for about half a second; the calls that take about `seconds`."""
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < 0.5:
        run()
        calls += 1
    return max(1, round(seconds / ((time.perf_counter() - start) / calls)))


def rate(run, calls, work):
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return work * calls / (time.perf_counter() - start) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", help="comma-separated kernels to run (default: all)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=0.1, help="length of one measurement")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of the table")
    args = parser.parse_args()
    wanted = set(args.cases.split(",")) if args.cases else None
    keep_freed_memory()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)

    cpu = cpu_name()
    if not args.json:
        print(f"kernels, float32, 1 thread, {args.repeats} repeats, {cpu}; "
              f"torch {torch.__version__}, onnxruntime {ort.__version__}")
        print(f"{'kernel':<15}{'shape':<15}{'unit':<8}{'pytorch (min - max)':>26}"
              f"{'onnxruntime (min - max)':>30}  pytorch/ort")
    for kernel, shape, unit, work, make, make_args in cases():
        if wanted and kernel not in wanted:
            continue
        (torch_run, torch_out), (ort_run, ort_out) = make(*make_args)
        ort_run()
        error = np.abs(torch_out - ort_out).max() / max(1.0, np.abs(torch_out).max())
        if error > 1e-4:
            sys.exit(f"kernel_peers: {kernel} {shape}: PyTorch and ONNX Runtime differ by "
                     f"{error:.1e}")
        peers = {"pytorch": torch_run, "onnxruntime": ort_run}
        calls = {name: calls_per_repeat(run, args.seconds) for name, run in peers.items()}
        rates = {name: [] for name in peers}
        for repeat in range(args.repeats):
            for name in (list(peers) if repeat % 2 == 0 else reversed(list(peers))):
                rates[name].append(rate(peers[name], calls[name], work))
        medians = {name: statistics.median(values) for name, values in rates.items()}
        ratio = statistics.median(t / o for t, o in zip(rates["pytorch"], rates["onnxruntime"]))
        if args.json:
            row = {"bench": "kernel", "cpu": cpu, "kernel": kernel, "shape": shape, "unit": unit,
                   "repeats": args.repeats, "pytorch_over_onnxruntime": ratio}
            for name, values in rates.items():
                row[name] = {"median": medians[name], "min": min(values), "max": max(values)}
            print(json.dumps(row))
        else:
            cells = "".join(f"{medians[n]:>10.2f} ({min(v):6.2f} - {max(v):6.2f})"
                            + " " * (4 if n == "pytorch" else 0) for n, v in rates.items())
            print(f"{kernel:<15}{shape:<15}{unit:<8}{cells}  {ratio:.2f}")


if __name__ == "__main__":
    main()
