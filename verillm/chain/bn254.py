"""BN254 curve arithmetic in revm's native precompiles: the fast `vrf.CurveBackend`.

The spec's VRF (`verillm/spec/vrf.py`) computes with py_ecc, a readable reference that takes
about half a second per pairing check. The EVM's own precompiles (0x07 scalar multiplication,
0x08 pairing check), run natively by revm, give the same points and answers in milliseconds.
Programs that verify many proofs (the daemon, the CLI, the test suite) install this backend at
start with `install_fast_bn254()`; `VERILLM_BN254_BACKEND=py_ecc` keeps the reference.
"""

import importlib.util
import sys
import threading

from verillm import envs
from verillm.errors import ConfigError, InvalidProof
from verillm.spec import vrf

EC_MUL_PRECOMPILE = "0x0000000000000000000000000000000000000007"
PAIRING_PRECOMPILE = "0x0000000000000000000000000000000000000008"
CALLER = "0x" + "00" * 19 + "01"
BACKEND_NAMES = ("py_ecc", "pyrevm")


class RevmBackend:
    """The BN254 precompiles in an in-memory revm, one EVM per thread (it holds no state we use)."""

    def __init__(self):
        self._local = threading.local()

    def compute_g1_multiple(self, point, scalar: int) -> bytes:
        return self._call(EC_MUL_PRECOMPILE, vrf.encode_g1(point) + scalar.to_bytes(32, "big"))

    def compute_pairing_check(self, pairs: list) -> bool:
        return self._call(PAIRING_PRECOMPILE, vrf.encode_pairing_input(pairs)) == (1).to_bytes(32, "big")

    def _call(self, address: str, calldata: bytes) -> bytes:
        if not hasattr(self._local, "evm"):
            import pyrevm  # noqa: PLC0415 (an optional dev dependency)

            self._local.evm = pyrevm.EVM()
        try:
            return bytes(self._local.evm.message_call(CALLER, address, calldata=calldata, is_static=True))
        except RuntimeError as exc:  # revm halts on inputs a precompile rejects
            raise InvalidProof(f"precompile {address[-2:]} rejected its input: {exc}") from None


def has_pyrevm() -> bool:
    """Return whether pyrevm can be imported (the dev extra installs it)."""
    return "pyrevm" in sys.modules or importlib.util.find_spec("pyrevm") is not None


def get_bn254_backend(name: str | None = None) -> vrf.CurveBackend:
    """Return the backend ``name`` names, else $VERILLM_BN254_BACKEND's, else revm when importable."""
    name = name or envs.get_bn254_backend() or ("pyrevm" if has_pyrevm() else "py_ecc")
    if name not in BACKEND_NAMES:
        raise ConfigError(f"unknown BN254 backend {name!r}; known: {BACKEND_NAMES}")
    return RevmBackend() if name == "pyrevm" else vrf.REFERENCE


def install_fast_bn254(name: str | None = None) -> vrf.CurveBackend:
    """Install the backend `get_bn254_backend` picks for every VRF call in this process."""
    backend = get_bn254_backend(name)
    vrf.use_backend(backend)
    return backend
