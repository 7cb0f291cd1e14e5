"""Config text is data and is bounded: aliases, depth, size, duplicate keys, absurd numbers and
code named in a file are refused with a message naming what was wrong."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainer.config.checks import ConfigError
from trainer.config.defaults import load_config, shipped_config_path
from trainer.config.loading import merge_settings
from trainer.config.permissions import CodePermissionError, code_entry_points, require_code_permission
from trainer.config.preflight import check_run_fits
from trainer.config.safe_yaml import YamlError, load_yaml_text
from trainer.config.validation import config_from_dict

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)
ROOT = Path(__file__).resolve().parents[1]


def test_alias_bomb_is_refused_before_it_expands():
    with pytest.raises(YamlError, match="alias"):
        load_yaml_text(BOMB)
    with pytest.raises(YamlError, match="alias"):
        load_yaml_text("num_envs: [&a [x, x, x], &b [*a, *a, *a], &c [*b, *b, *b], [*c, *c, *c]]")


def test_alias_bomb_in_a_file_keeps_memory_small(tmp_path):
    """In a child with a 1 GiB address-space limit: refusing the bomb needs almost nothing."""
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    code = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 * 1024 ** 3, 2 * 1024 ** 3))
        from trainer.config.checks import ConfigError
        from trainer.config.defaults import load_config
        try:
            load_config({str(path)!r})
        except ConfigError as error:
            print("refused:", error)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused:" in result.stdout and "alias" in result.stdout
    assert len(result.stdout) < 500


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 10_000, "nested"),
        ("a: 1\na: 2\n", "second time"),
        ("num_envs: 8\nnum_envs: 16\n", "'num_envs' a second time"),
        ("x" * 1_000_001, "too large"),
        ("", "empty"),
        ("- 1\n- 2\n", "mapping"),
        ("a: [1, 2\n", "not valid YAML at line"),
    ],
)
def test_bad_yaml_texts_get_a_message(text, message):
    with pytest.raises(YamlError, match=message):
        load_yaml_text(text, "config.yaml")


def test_non_utf8_and_empty_files_are_config_errors(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("env_name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(latin)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    with pytest.raises(ConfigError, match="empty"):
        load_config(empty)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"num_envs": 10**12}, "num_envs must be at most"),
        ({"num_envs": 10**62}, "num_envs must be at most"),
        ({"num_steps": 10**9}, "num_steps must be at most"),
        ({"total_timesteps": 10**18}, "total_timesteps must be at most"),
        ({"update_epochs": 10**6}, "update_epochs must be at most"),
        ({"gif_max_frames": 10**7}, "gif_max_frames must be at most"),
        ({"torch_threads": 10**5}, "torch_threads must be at most"),
        ({"num_workers": 10**5}, "num_workers must be at most"),
        ({"checkpoint": {"keep": 10**7}}, "checkpoint.keep must be at most"),
        ({"seed": 2**70}, "seed must be at most"),
        ({"env_name": "x" * 10_000}, "env_name must be at most 200 characters"),
    ],
)
def test_absurd_numbers_are_refused_naming_the_key(raw, message):
    with pytest.raises(ConfigError, match=message) as info:
        config_from_dict(raw)
    assert len(str(info.value)) < 400, "messages quote a short excerpt, never the whole value"


def test_a_huge_batch_that_does_not_divide_is_answered_at_once():
    with pytest.raises(ConfigError, match="nearby values that do"):
        config_from_dict({"num_envs": 10**6, "num_steps": 99_991, "mini_batch_size": 7})


def test_run_that_does_not_fit_in_memory_is_refused_before_it_starts():
    config = config_from_dict({"num_envs": 2**20, "num_steps": 100_000})
    with pytest.raises(ConfigError, match="num_envs x num_steps .* GiB"):
        check_run_fits(config)
    check_run_fits(config_from_dict({"num_envs": 16}))  # an ordinary run passes


@pytest.mark.parametrize(
    "env_kwargs, message", [({"grid_size": -3}, "grid_size"), ({"grdi_size": 12}, "Did you mean 'grid_size'")]
)
def test_env_options_are_checked_before_a_run_starts(env_kwargs, message):
    with pytest.raises(ConfigError, match=message):
        check_run_fits(config_from_dict({"env_name": "snake", "env_kwargs": env_kwargs}))


def test_code_named_in_a_config_needs_permission():
    raw = {"env_name": "os:system", "env_kwargs": {"command": "touch /tmp/pwned"}}
    assert code_entry_points(raw) == ["os:system"]
    assert code_entry_points({"env_name": "gym:mypkg.envs:Game", "wrappers": ["a.b:W"]}) == ["mypkg.envs:Game", "a.b:W"]
    assert code_entry_points({"env_name": "Acrobot-v1"}) == []
    with pytest.raises(CodePermissionError, match="model.pth names Python code.*--allow-custom-envs"):
        require_code_permission(raw, False, "model.pth", "--allow-custom-envs")
    require_code_permission(raw, True, "model.pth", "--allow-custom-envs")


@pytest.mark.parametrize("name", ["/etc/passwd", "../../configs/cartpole", "configs/../../x", "NotAnEnv-v9"])
def test_tuned_config_lookup_never_uses_user_text_as_a_path(name):
    assert shipped_config_path(name) is None


def test_one_rule_for_derived_batch_keys():
    base = config_from_dict({"num_envs": 8, "num_steps": 32}).to_dict()
    merged = merge_settings(base, {"num_envs": 16})
    assert config_from_dict(merged).batch_size == 16 * 32
    merged = merge_settings(base, {"batch_size": 512})
    assert config_from_dict(merged).num_steps == 64
    merged = merge_settings({"max_steps": 100}, {"total_timesteps": 200})
    assert config_from_dict(merged).total_timesteps == 200


@pytest.mark.parametrize(
    "text, where",
    [
        ("env_name: cartpole\nnum_envs: 4\x00\n", "a control character (NUL, 0x00) at line 2 column 12"),
        ("seed: 1\x07\n", "a control character (BEL, 0x07) at line 1 column 8"),
        ("env_name: \ufffe\n", "a non-printable character (U+FFFE) at line 1 column 11"),
    ],
)
def test_control_characters_are_named_with_their_line_and_column(text, where):
    with pytest.raises(YamlError) as info:
        load_yaml_text(text, "config.yaml")
    assert str(info.value).startswith(f"config.yaml contains {where}; YAML allows only printable characters")


def test_cli_config_with_a_nul_byte_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"env_name: cartpole\nnum_envs: 4\x00\n")
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "--config", str(bad), "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "ReaderError" not in result.stderr
    assert result.stderr.strip() == (
        f"error: {bad} contains a control character (NUL, 0x00) at line 2 column 12; "
        "YAML allows only printable characters (save the file as plain text, without "
        "binary data)"
    )
    assert not (tmp_path / "runs").exists()
