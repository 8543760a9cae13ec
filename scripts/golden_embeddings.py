#!/usr/bin/env python3
"""Golden sentence embeddings of all-MiniLM-L6-v2 in float64, for the Rust encoder's test.

Loads the checkpoint from the directory that scripts/fetch-minilm.sh prints, runs the model's own
sentence-transformers pipeline (BertModel, mean pooling, Normalize) with every module in float64,
and writes examples/data/minilm-golden.json: the model's package and version, and for each of the
fixed sentences below its token ids ([CLS] and [SEP] included) and its embedding, floats written
with repr (round-trip exact). Each sentence is encoded alone (batch 1, no padding) with the model's
max_seq_length; the sentences span 3 to 128 tokens, so nothing is truncated.

It then encodes the same sentences in float32 and prints the worst 1 - cos and max |delta|
against float64: the accuracy a float32 PyTorch forward pass reaches.

Environment, a virtual environment outside the repository (torch from PyPI pulls its CUDA
packages, several GB; PyPI has no CPU-only wheel):
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -r scripts/requirements-golden.txt
Run from the repository root:
    "$VENV/bin/python" scripts/golden_embeddings.py "$(scripts/fetch-minilm.sh)"
"""

import argparse
import json
import os
import sys
from importlib import metadata
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the local directory

import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# Token counts ([CLS] and [SEP] included) run from 3 to exactly 128; main() checks both ends.
SENTENCES = [
    "a",
    "Hi!",
    "Hello, world.",
    "The cat sat on the mat.",
    "I love this 😀 emoji!",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "naïve façade, coöperate: re\u0301sume\u0301 with combining accents",
    "Don't you think it's \"obvious\"?",
    "Tabs\tand   several    spaces\u00a0and a zero\u200bwidth space.",
    "A man is playing a guitar on stage while the crowd sings along.",
    "Antidisestablishmentarianism is hard to tokenize.",
    "A word longer than a hundred characters becomes one unknown token: " + "abcdefghij" * 11 + ".",
    "Café crème brûlée à Genève, Zürich and Ångström.",
    "東京 is the capital of Japan; 北京 is China's.",
    "How do I bake sourdough bread at home without a Dutch oven?",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "αβγ δ ε — Greek letters and an em dash… and “smart quotes”.",
    "Sentence embeddings map text to dense vectors so that semantically similar sentences lie "
    "close together.",
    "The weather forecast predicts heavy rain tomorrow in the northern regions, with winds up "
    "to 80 km/h.",
    "It costs $3.14, or 1,024 yen on 2024-05-17 at 09:30.",
    "e-mail me at someone@example.com or visit https://example.org/a?b=c",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong and Buzz Aldrin walked on its "
    "surface while Michael Collins orbited above in the command module.",
    "The committee reviewed 42 proposals, rejected 17 of them outright, and asked the "
    "remaining authors to resubmit revised budgets by the end of March, noting that funding is "
    "limited this year.",
    "Rivers carry sediment from the mountains to the sea, building deltas where the current "
    "slows; over centuries these fertile plains have fed great cities, drawn traders from "
    "distant lands and flooded, without warning, the very fields they made.",
    "Photosynthesis converts light energy into chemical energy: chlorophyll absorbs mostly "
    "blue and red light, water molecules are split to release oxygen, and the energy captured "
    "is stored in sugars that the plant later uses for growth, repair and reproduction "
    "throughout its life.",
    "The recipe is simple: mix 500 g of flour, 350 ml of warm water, 10 g of salt and a "
    "spoonful of starter, let the dough rest overnight, fold it twice in the morning, then "
    "bake it in a hot oven at 250 °C for about forty minutes until the crust crackles and "
    "sings.",
    "When the old lighthouse keeper retired after forty years, the villagers gathered on the "
    "cliff to thank him; children brought drawings of the tower, fishermen told stories of "
    "storms he had guided them through, and the mayor unveiled a small bronze plaque, while "
    "the sea below kept breaking against the rocks as it always had, indifferent to speeches, "
    "songs and the slow fading of the evening light.",
    "Chess openings have been studied for centuries. The Sicilian Defence, the Queen's Gambit "
    "and the Ruy Lopez each lead to distinct middle games, and grandmasters prepare dozens of "
    "moves deep with engines before a tournament. Yet in practice a single inaccurate move can "
    "turn a carefully prepared position upside down, and the player who calculates better at "
    "the board, keeps calm under time pressure and avoids blunders in the endgame usually wins "
    "the game, whatever the opening was.",
    "Libraries once held the only copies of many books, and librarians catalogued every volume "
    "by hand. Today most catalogues are digital, search takes milliseconds, and a reader in "
    "one country can borrow an e-book from another; still, the quiet rooms, the smell of paper "
    "and the surprise of finding an unexpected title on a nearby shelf keep people coming back "
    "every week, especially students preparing for exams, retirees with time to read, and "
    "parents who bring their small children to the Saturday story hour in the basement.",
    "Modern CPUs execute several instructions per cycle: they decode and rename instructions "
    "out of order, keep hundreds of them in flight, predict branches, and rely on deep cache "
    "hierarchies (L1, L2, L3) to hide the latency of main memory, which can exceed 100 "
    "nanoseconds; vector units such as AVX-512 process sixteen single-precision floats at "
    "once, and fused multiply-add doubles the arithmetic per instruction, so a well-tuned "
    "matrix multiplication reaches most of the peak, whereas softmax or layer normalization "
    "kernels are limited by memory bandwidth instead.",
    "Modern CPUs execute several instructions per cycle: they decode and rename instructions "
    "out of order, keep hundreds of them in flight, predict branches, and rely on deep cache "
    "hierarchies (L1, L2, L3) to hide the latency of main memory, which can exceed 100 "
    "nanoseconds; vector units such as AVX-512 process sixteen single-precision floats at "
    "once, and fused multiply-add doubles the arithmetic per instruction, so a well-tuned "
    "matrix multiplication reaches most of the peak, whereas softmax or layer normalization "
    "kernels are limited by main memory bandwidth instead.",
]


def package_of(model_dir):
    """'name version' of the wheel the model directory was unpacked from."""
    for meta in model_dir.parent.parent.glob("*.dist-info/METADATA"):
        fields = dict(line.split(": ", 1) for line in meta.read_text().splitlines() if ": " in line)
        return f"{fields['Name']} {fields['Version']}"
    sys.exit(f"golden_embeddings: no *.dist-info beside {model_dir.parent}; pass the directory "
             "that scripts/fetch-minilm.sh prints")


def require_dtype(model, dtype):
    """Makes every module's floating-point output fail loudly unless it is of `dtype`."""
    def check(module, _inputs, output):
        todo = [output]
        while todo:
            x = todo.pop()
            if isinstance(x, torch.Tensor):
                if x.is_floating_point() and x.dtype != dtype:
                    raise TypeError(f"{type(module).__name__} produced {x.dtype}, not {dtype}")
            elif isinstance(x, dict):
                todo.extend(x.values())
            elif isinstance(x, (list, tuple)):
                todo.extend(x)
    for module in model.modules():
        module.register_forward_hook(check)


def embed(model, dtype):
    """Embeddings of SENTENCES, each encoded alone, as one (n, 384) tensor of `dtype`."""
    model.to(dtype)
    require_dtype(model, dtype)
    with torch.inference_mode():
        out = model.encode(SENTENCES, batch_size=1, convert_to_tensor=True)
    assert out.dtype == dtype, out.dtype
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path, help="directory printed by scripts/fetch-minilm.sh")
    parser.add_argument("--out", type=Path, default=REPO / "examples/data/minilm-golden.json")
    args = parser.parse_args()
    if not (args.model_dir / "model.safetensors").is_file():
        sys.exit(f"golden_embeddings: no model.safetensors in {args.model_dir}")
    torch.set_num_threads(1)  # one summation order, so that reruns write the same bits

    model = SentenceTransformer(str(args.model_dir), device="cpu")
    tokens = [model.tokenizer(s)["input_ids"] for s in SENTENCES]  # no truncation asked
    for s, t in zip(SENTENCES, tokens):  # the ids that encode() will use
        assert model.preprocess([s])["input_ids"][0].tolist() == t, s
    lengths = sorted(map(len, tokens))
    if lengths[0] > 3 or lengths[-1] != 128 or lengths[-1] > model.max_seq_length:
        sys.exit(f"golden_embeddings: token counts {lengths[0]}..{lengths[-1]}, want 1-3..128 "
                 f"within max_seq_length {model.max_seq_length}")

    golden = embed(model, torch.float64)
    rough = embed(SentenceTransformer(str(args.model_dir), device="cpu"), torch.float32).double()

    one_minus_cos = 1 - torch.nn.functional.cosine_similarity(golden, rough, dim=1)
    print(f"float32 against float64 over {len(SENTENCES)} sentences: "
          f"worst 1 - cos = {one_minus_cos.max().item():.3e}, "
          f"max |delta| = {(golden - rough).abs().max().item():.3e}")

    versions = {p: metadata.version(p) for p in ("torch", "transformers", "sentence-transformers")}
    header = {
        "model": package_of(args.model_dir.resolve()) + " (sentence-transformers/all-MiniLM-L6-v2)",
        "dtype": "float64",
        "pipeline": "BertModel, mean pooling over the attention mask, L2 normalization; "
                    "each sentence alone, no padding, no truncation",
        "generated_by": "scripts/golden_embeddings.py with "
                        + ", ".join(f"{p} {v}" for p, v in versions.items()),
    }
    # One sentence a line keeps the file diffable; json writes floats with repr.
    fields = [f" {json.dumps(k)}: {json.dumps(v)},\n" for k, v in header.items()]
    sentences = [json.dumps({"text": s, "tokens": t, "embedding": e})
                 for s, t, e in zip(SENTENCES, tokens, golden.tolist())]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("{\n" + "".join(fields) + ' "sentences": [\n  '
                        + ",\n  ".join(sentences) + "\n ]\n}\n")
    print(f"wrote {args.out} ({len(SENTENCES)} sentences, {lengths[0]} to {lengths[-1]} tokens)")


if __name__ == "__main__":
    main()
