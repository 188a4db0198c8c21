"""Where a model's tolerance profile is found, and what to run when there is none.

Tolerance mode (every manifest without an exact kernel class) compares fingerprints against
calibrated thresholds, so a node may serve a model only once a profile exists for its
(model id, dtype). `verillm calibrate --model PATH` writes it as
``<profile dir>/<model id hex>-<dtype>.json``; the node looks there (`engine.profile_dir`,
default ``profiles`` beside its store), then at the profiles shipped for the aliases (tiny,
smollm2: `verillm/profiles/<alias>-<dtype>.json`). Imports neither torch nor transformers.
"""

from importlib import resources
from pathlib import Path

from verillm.engine.checkpoints import resolve_model_source
from verillm.errors import ConfigError, ProfileMissing
from verillm.spec.policy import ToleranceProfile, compute_exact_profile
from verillm.spec.types import ModelManifest

DEFAULT_PROFILE_DIR = "profiles"
CALIBRATE_DTYPE_FLAGS = {"float32": "fp32", "bfloat16": "bf16"}


def load_profile(model: str, dtype: str, path: str | Path | None = None) -> ToleranceProfile:
    """Return the profile at ``path``, or the shipped one for (model, dtype)."""
    if path is not None:
        return ToleranceProfile.from_json(Path(path).read_text())
    name = f"{model}-{dtype}.json"
    shipped = resources.files("verillm") / "profiles" / name
    if not shipped.is_file():
        raise ConfigError(f"no tolerance profile shipped for {model}/{dtype}; run `verillm calibrate --model {model} --dtype {dtype}`")
    return ToleranceProfile.from_json(shipped.read_text())


def select_profile(manifest, model: str, path: str | Path | None = None) -> ToleranceProfile:
    """Return the profile a check of ``manifest`` uses: zero tolerance in exact mode, else the calibrated one."""
    if manifest.kernel_class:
        if path is not None:
            raise ConfigError(f"manifest {manifest.name} is exact (kernel class {manifest.kernel_class}): it takes no tolerance profile")
        return compute_exact_profile(model, manifest.dtype, tuple(manifest.committed_layers))
    return load_profile(model, manifest.dtype, path)


def get_profile_path(profile_dir: str | Path, model_id: bytes, dtype: str) -> Path:
    """Return where the calibrated profile of (``model_id``, ``dtype``) lives in ``profile_dir``."""
    return Path(profile_dir) / f"{model_id.hex()}-{dtype}.json"


def compute_calibrate_command(model: str, dtype: str, profile_dir: str | Path) -> str:
    """Return the command that writes the missing profile where the node looks for it."""
    return f"verillm calibrate --model {model} --dtype {CALIBRATE_DTYPE_FLAGS.get(dtype, dtype)} --profile-dir {Path(profile_dir).resolve()}"


def is_tolerance_mode(manifest: ModelManifest) -> bool:
    """Whether audits of ``manifest`` compare against calibrated thresholds (and so need a profile).

    An exact manifest (one with a kernel class) compares bit for bit and needs no profile.
    """
    return not manifest.kernel_class


def get_shipped_profile_alias(model: str, dtype: str) -> str | None:
    """Return the alias whose shipped profile covers ``model`` (an alias or its directory), if any."""
    alias = resolve_model_source(model).alias
    if alias is None or not (resources.files("verillm") / "profiles" / f"{alias}-{dtype}.json").is_file():
        return None
    return alias


def find_profile(model: str, model_id: bytes, dtype: str, profile_dir: str | Path = DEFAULT_PROFILE_DIR) -> ToleranceProfile:
    """Return the profile for ``model`` (as given to --model) with ``model_id`` and ``dtype``.

    Raises ProfileMissing with the exact `verillm calibrate` command when none exists.
    """
    path = get_profile_path(profile_dir, model_id, dtype)
    if path.is_file():
        return ToleranceProfile.from_json(path.read_text())
    alias = get_shipped_profile_alias(model, dtype)
    if alias is not None:
        return load_profile(alias, dtype)
    raise ProfileMissing(
        f"no tolerance profile for model 0x{model_id.hex()} ({dtype}): looked for {path.resolve()}; "
        f"calibrate it first: {compute_calibrate_command(model, dtype, profile_dir)}"
    )


def check_servable(model: str, manifest: ModelManifest, model_id: bytes, profile_dir: str | Path) -> ToleranceProfile | None:
    """Refuse (ProfileMissing) to serve a tolerance-mode manifest without a profile; return the profile."""
    if not is_tolerance_mode(manifest):
        return None
    return find_profile(model, model_id, manifest.dtype, profile_dir)


def get_model_profile(model: str, manifest: ModelManifest, path: str | Path | None = None, profile_dir: str | Path = DEFAULT_PROFILE_DIR) -> ToleranceProfile:
    """Return the zero-tolerance profile of an exact manifest; else the profile at ``path`` when
    given, else the one `find_profile` finds for ``manifest``."""
    from verillm.spec.job import compute_model_id

    if not is_tolerance_mode(manifest):
        return select_profile(manifest, model, path)  # zero tolerance; refuses a --profile
    if path is not None:
        return ToleranceProfile.from_json(Path(path).read_text())
    return find_profile(model, compute_model_id(manifest), manifest.dtype, profile_dir)
