"""The public API named in the architecture page resolves and behaves as documented."""

import subprocess
import sys

import ctxkit


def test_every_public_name_resolves():
    missing = [name for name in ctxkit.__all__ if getattr(ctxkit, name, None) is None]
    assert missing == []


def test_pack_is_callable_whichever_import_comes_first():
    code = (
        "import ctxkit.pack.plan, ctxkit\n"
        "b = ctxkit.pack([[1, 2, 3], [4, 5]], capacity=4)\n"
        "assert b.input_ids.tolist() == [[1, 2, 3, 0], [4, 5, 0, 0]]\n"
        "import ctxkit.pack.collate\n"
        "assert callable(ctxkit.pack)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert ctxkit.pack([[7]], capacity=2).input_ids.tolist() == [[7, 0]]


def test_import_is_light():
    code = "import sys, ctxkit; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"
