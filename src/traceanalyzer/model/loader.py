"""Loading a run configuration: a TOML file and/or Megatron-LM arguments -> a validated
:class:`~traceanalyzer.model.config.RunConfig`.

Above :mod:`.config` (the dataclasses and the TOML reader), :mod:`.megatron` and :mod:`.nemo`
(Megatron arguments and NeMo YAML), which build on those dataclasses: so none of them imports
another in a cycle.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import replace
from pathlib import Path

from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import _ALIASES, _SECTIONS, RunConfig, _read_text, config_from_dict
from traceanalyzer.model.megatron import megatron_defaults, read_megatron

__all__ = ["load_config", "parse_megatron_args"]


def load_config(path: str | os.PathLike[str] | None = None, megatron_args: str | os.PathLike[str] | None = None) -> RunConfig:
    """Load a run configuration from a TOML file and/or Megatron-LM arguments.

    With both, the Megatron arguments come first and the TOML completes or overrides them
    (typically ``[hardware]`` and ``[reported]``, which launch arguments do not carry, or a value
    the launch script takes from its environment).
    """
    if path is None and megatron_args is None:
        raise ConfigError("no run configuration given: pass --config run.toml and/or --megatron-args FILE")
    cfg: RunConfig | None = None
    if megatron_args is not None:
        margs = Path(megatron_args)
        cfg = read_megatron(_read_text(margs, "Megatron argument file"), source=str(margs))
    if path is not None:
        p = Path(path)
        text = _read_text(p, "configuration file")
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from None
        source = str(p) if cfg is None else f"{cfg.source} + {p}"
        given = {f"{sec}.{_ALIASES.get(sec, {}).get(k, k)}" for sec, tbl in doc.items()
                 if sec in _SECTIONS and isinstance(tbl, dict) for k in tbl}
        base = cfg
        if cfg is not None:
            base = replace(cfg, unresolved=tuple((k, m) for k, m in cfg.unresolved if k not in given))
        cfg = config_from_dict(doc, source=source, base=base, validate=False)
    assert cfg is not None
    if megatron_args is not None:
        cfg = megatron_defaults(cfg)
    for _key, message in cfg.unresolved:
        raise ConfigError(message)
    try:
        return cfg.validate()
    except ConfigError as exc:
        used = [w.split(": ", 2)[-1] for w in cfg.warnings if "own defaults are used" in w]
        if used:  # the inconsistency may come from a default the script took: say which
            raise ConfigError(f"{exc.message} (the script's defaults were used for {used[0]})") from None
        raise


def parse_megatron_args(text: str, source: str = "megatron arguments") -> RunConfig:
    """Read Megatron-LM launch arguments, a launch script or a training log into a RunConfig.

    See :mod:`traceanalyzer.model.megatron`. A value the script takes from outside (an
    environment variable, a positional parameter) is an error naming the argument and its line.
    """
    cfg = megatron_defaults(read_megatron(text, source))
    for _key, message in cfg.unresolved:
        raise ConfigError(message)
    return cfg.validate()
