import pytest
import yaml

from hpclaunch.train_entry.config import ConfigError, build_config, derive, load_job_yaml

JOB = """
name: digits
profile:
  limits: {max_epochs: 50, max_batch_per_gpu: 128, lr_range: [1.0e-5, 1.0e-2]}
  training: {batch_per_gpu: 32, precision: bf16, lr_scaling: sqrt, grad_accum: 2}
train:
  epochs: 12
  lr: 0.002
  seed: 7
  checkpoint_every: 50
  keep_checkpoints: 2
"""


def test_job_yaml_then_cli(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text(JOB)
    cfg = build_config({"epochs": 3, "precision": None}, load_job_yaml(str(p)))
    assert cfg.epochs == 3                       # CLI wins
    assert cfg.batch_size == 32 and cfg.precision == "bf16" and cfg.lr_scaling == "sqrt"   # profile.training
    assert cfg.lr == 0.002 and cfg.seed == 7 and cfg.checkpoint_every == 50 and cfg.keep_checkpoints == 2
    assert cfg.limits.max_epochs == 50 and cfg.limits.lr_range == (1e-5, 1e-2)
    der = derive(cfg, world_size=4)
    assert der.accum_steps == 2 and der.global_batch == 32 * 4 * 2 and der.lr == pytest.approx(0.004)


def test_missing_file_and_keys_are_tolerated(tmp_path):
    assert load_job_yaml(str(tmp_path / "nope.yaml")) == {}
    cfg = build_config({}, {"profile": None, "train": {"unknown_key": 1}})
    assert cfg.epochs == 10 and cfg.limits.max_epochs is None


def test_limits_are_enforced():
    job = yaml.safe_load(JOB)
    with pytest.raises(ConfigError, match="max_epochs=50"):
        derive(build_config({"epochs": 51}, job), 1)
    with pytest.raises(ConfigError, match="max_batch_per_gpu=128"):
        derive(build_config({"batch_size": 256}, job), 1)
    with pytest.raises(ConfigError, match=r"effective LR 0.04 .*outside profile.limits.lr_range"):
        derive(build_config({"lr": 0.02, "lr_scaling": "linear"}, job), 2)


def test_global_batch_to_accumulation():
    cfg = build_config({"batch_size": 16, "global_batch": 128})
    assert derive(cfg, 2).accum_steps == 4
    assert derive(cfg, 8).accum_steps == 1
    with pytest.raises(ConfigError, match="not a positive multiple"):
        derive(cfg, 3)
    assert derive(build_config({"lr": 0.01, "lr_scaling": "sqrt"}), 4).lr == pytest.approx(0.02)
