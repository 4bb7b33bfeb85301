"""Packing: plans on lengths (``plan``), collation to tensors (``collate``), HF interop (``hf``).

``ctxkit.pack`` is also the function :func:`ctxkit.pack.collate.pack`. Importing any
submodule makes Python bind the *package* to the name ``ctxkit.pack``, so the package itself
is made callable and forwards to that function; both spellings then always work.
"""

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from ctxkit.pack.collate import pack

        return pack(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
