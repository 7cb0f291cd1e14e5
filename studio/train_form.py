"""The Train tab's form: one control per config key (studio/form.py declares them), and what fills
it: the env's tuned config, the shown run's settings, pasted or uploaded YAML; and the form
exported as YAML. A message about the form goes stale once a field is edited. Under the basic
fields, the batch note: what the batch keys add up to, and what the run's preflight
(trainer.config.preflight) warns about or would refuse, before Start is pressed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from studio import views
from studio.form import (
    BASIC_FIELDS,
    FORM_FIELDS,
    FormField,
    advanced_groups,
    config_from_yaml_text,
    form_values,
    tuned_config,
    validated_config,
    visible_fields,
    visible_groups,
    yaml_from_config,
)
from studio.handlers import PRIVATE, USER_ERRORS, Handlers, bold_message
from trainer.config.defaults import defaults_source
from trainer.config.safe_yaml import MAX_YAML_BYTES
from trainer.config.validation import config_from_dict
from trainer.run.files import atomic_write
from trainer.run.layout import safe_name

BATCH_KEYS = ("num_envs", "num_steps", "mini_batch_size", "total_timesteps")  # what the batch note says
# A change of one of these redraws the batch note (its warnings depend on the game and the algorithm too).
NOTE_KEYS = (*BATCH_KEYS, "env_name", "algo", "device", "buffer_size")


class FormHandlers(Handlers):
    """What fills the form, and the form exported as YAML."""

    def on_env_change(self, env_name: str, algo: str = "ppo"):
        """Fill the form from the tuned config of the env with the chosen algorithm
        (configs/<env>.yaml, configs/cartpole_dqn.yaml), or from the defaults when there is none,
        when the env or the algorithm changes; the message says which of the two it was."""
        try:
            config = tuned_config(env_name, algo or "ppo")
        except USER_ERRORS as error:
            return [gr.skip()] * len(FORM_FIELDS) + [bold_message(error)]
        values = form_values(config)
        keep = {"env_name", "device", "algo"}
        updates = [gr.skip() if form_field.key in keep else value for form_field, value in zip(FORM_FIELDS, values)]
        return updates + [env_fill_message(env_name, algo or "ppo")]

    def on_load_run_settings(self, run_id: str | None):
        """The shown run's settings into the form (every field), e.g. to start a variant of it."""
        run = self._snapshot(run_id)
        unchanged = [gr.skip()] * len(FORM_FIELDS)
        if run is None:
            return unchanged + ["**No run is shown yet:** start one, or open one from the Runs tab."]
        try:
            values = form_values(config_from_dict(run.config).to_dict())
        except USER_ERRORS as error:
            return unchanged + [bold_message(f"Run {run.run_id}'s settings do not fit the form: {error}")]
        return values + [f"The form holds the settings of **{run.run_id}**."]

    def on_load_yaml(self, text: str):
        """Pasted YAML -> the form (every field), with a note about keys the studio ignores."""
        try:
            config, notes = config_from_yaml_text(text)
        except USER_ERRORS as error:
            gr.Warning(str(error).splitlines()[0])
            return [gr.skip()] * len(FORM_FIELDS) + [bold_message(error)]
        message = "Loaded the YAML into the form." + "".join(f"\n\n{note}" for note in notes)
        return form_values(config) + [message]

    def on_upload_yaml(self, path: str | None):
        """An uploaded .yaml: its text into the YAML box, and the form filled from it."""
        if not path:
            return gr.skip(), *[gr.skip()] * len(FORM_FIELDS), gr.skip()
        name = Path(path).name  # never the server path Gradio stored it under
        try:
            size = Path(path).stat().st_size
            if size > MAX_YAML_BYTES:  # checked before reading: a config is a few hundred bytes
                return (
                    gr.skip(),
                    *[gr.skip()] * len(FORM_FIELDS),
                    (f"**{name} is too large ({size:_} bytes; a config is at most {MAX_YAML_BYTES:_}).**"),
                )
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return gr.skip(), *[gr.skip()] * len(FORM_FIELDS), f"**{name} is not a text (YAML) file.**"
        return (text, *self.on_load_yaml(text))

    def on_batch_note(self, *values):
        """The batch note for the form's values (in FORM_FIELDS order): views.batch_note's sums,
        then the warnings of trainer.config.preflight, or why Start would refuse the run; nothing
        more while the form does not validate (Start says why)."""
        named = dict(zip((form_field.key for form_field in FORM_FIELDS), values))
        note = views.batch_note(*(named.get(key) for key in BATCH_KEYS))
        try:
            config = validated_config(values, self.allow_custom_envs)
        except USER_ERRORS:
            return note
        from trainer.config.preflight import check_run_fits

        try:
            found = check_run_fits(config)
        except USER_ERRORS as error:
            return note + views.warning_lines([f"Start would refuse this run: {error}"])
        return note + views.warning_lines(found)

    def on_export_yaml(self, *values):
        """The form as YAML: into the YAML box, and as a file (in the scratch folder) to download."""
        try:
            config = validated_config(values, allow_custom_envs=True)
        except USER_ERRORS as error:
            return gr.skip(), gr.skip(), bold_message(error)
        text = yaml_from_config(config)
        name = f"{safe_name(str(config.env_name))}-{time.strftime('%Y%m%d-%H%M%S')}.yaml"
        path = atomic_write(self.scratch.file("exports", name), text)
        return text, gr.File(value=str(path), visible=True), "Exported the form as YAML (below, and as a file)."


def env_fill_message(env_name: str, algo: str = "ppo") -> str:
    """What on_env_change filled the form with: the tuned config only where one ships, else which
    defaults (trainer.config.defaults.defaults_source says it for the CLI and the API alike)."""
    return f"Filled the form with {defaults_source(env_name, algo)}."


# ----------------------------------------------------------------------------- components


@dataclass
class FormPanel:
    """The form's components."""

    controls: dict[str, Any]  # config key -> its control
    # The Advanced part's groups (title and rows) and rows, each with its fields: shown while one is
    sections: list[tuple[gr.Column | gr.Row, tuple[FormField, ...]]]
    batch_info: gr.Markdown
    load_run_button: gr.Button
    yaml_box: gr.Code
    load_yaml_button: gr.Button
    upload_yaml_button: gr.UploadButton
    export_yaml_button: gr.Button
    export_file: gr.File

    @property
    def inputs(self) -> list:
        """Every control, in FORM_FIELDS order (what validated_config and form_values take)."""
        return [self.controls[form_field.key] for form_field in FORM_FIELDS]


def build_form(default_values: dict[str, Any], devices: Sequence[str], env_choices: Sequence[str]) -> FormPanel:
    """The basic fields, the batch note, the Advanced groups two fields a row, the YAML section."""
    controls: dict[str, Any] = {}
    for form_field in BASIC_FIELDS:
        controls[form_field.key] = _form_component(form_field, default_values[form_field.key], devices, env_choices)
    batch_info = gr.Markdown(views.batch_note(*(default_values[key] for key in BATCH_KEYS)), elem_id="batch-note")
    load_run_button = gr.Button("Load the shown run's settings", size="sm", elem_id="load-run-settings")
    sections: list[tuple[gr.Column | gr.Row, tuple[FormField, ...]]] = []
    algo = default_values["algo"]
    with gr.Accordion("Advanced", open=False, elem_id="advanced"):
        for (title, group), shown in zip(advanced_groups(), visible_groups(algo)):
            group_id = "group-" + "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split())
            with gr.Column(visible=shown, elem_id=group_id) as column:  # "DQN", title and all, only for dqn
                sections.append((column, tuple(group)))
                gr.Markdown(f"**{title}**", elem_classes=["field-group-title"])
                for pair in (tuple(group[i : i + 2]) for i in range(0, len(group), 2)):
                    with gr.Row(visible=any(form_field.shown_for(algo) for form_field in pair)) as row:
                        sections.append((row, pair))  # no empty row's gap where PPO's keys were
                        for form_field in pair:
                            controls[form_field.key] = _form_component(
                                form_field,
                                default_values[form_field.key],
                                devices,
                                env_choices,
                                visible=form_field.shown_for(algo),
                            )
    with gr.Accordion("YAML config", open=False, elem_id="yaml-section"):
        yaml_box = gr.Code(language="yaml", lines=12, label="Paste a config, or export the form", elem_id="yaml-box")
        with gr.Row():
            load_yaml_button = gr.Button("Load into form", size="sm", elem_id="load-yaml")
            upload_yaml_button = gr.UploadButton(
                "Upload .yaml", file_types=[".yaml", ".yml"], size="sm", elem_id="upload-yaml"
            )
            export_yaml_button = gr.Button("Export form", size="sm", elem_id="export-yaml")
        export_file = gr.File(label="Exported config", visible=False, interactive=False)
    return FormPanel(
        controls,
        sections,
        batch_info,
        load_run_button,
        yaml_box,
        load_yaml_button,
        upload_yaml_button,
        export_yaml_button,
        export_file,
    )


def wire_form(handlers: FormHandlers, form: FormPanel, run_box: gr.Textbox, message: gr.Markdown) -> None:
    """The form's events; `run_box` names the run the Train tab shows, `message` is its message box."""
    controls, form_inputs = form.controls, form.inputs
    # A new env or a new algorithm (chosen by the user, not filled in): its tuned settings.
    for name in ("env_name", "algo"):
        controls[name].input(
            handlers.on_env_change, [controls["env_name"], controls["algo"]], [*form_inputs, message], **PRIVATE
        )
    # One event for all of them (a page load fills every field at once): its runs never overlap,
    # and the last one reads the values the form ended with, so the note always matches the form.
    gr.on(
        [controls[key].change for key in NOTE_KEYS if key in controls],
        handlers.on_batch_note,
        form_inputs,
        form.batch_info,
        trigger_mode="always_last",
        show_progress="hidden",
        **PRIVATE,
    )

    # An algorithm's own keys show while it is chosen, and a group or row while one of its keys
    # does (studio/form.py visible_fields).
    def show_for(algo: str) -> list:
        sections = [any(form_field.shown_for(algo) for form_field in fields) for _, fields in form.sections]
        return [gr.update(visible=shown) for shown in visible_fields(algo) + sections]

    controls["algo"].change(
        show_for, controls["algo"], [*form_inputs, *(section for section, _ in form.sections)], **PRIVATE
    )
    # A message about the form (an error, "Filled the form ...") goes stale once a field is
    # edited: cleared in the browser, no server round trip.
    for form_field in FORM_FIELDS:
        if form_field.key not in ("env_name", "algo"):  # their own handler writes the message
            controls[form_field.key].input(None, None, message, js="() => ''", **PRIVATE)
    form.load_run_button.click(handlers.on_load_run_settings, run_box, [*form_inputs, message], **PRIVATE)
    form.load_yaml_button.click(handlers.on_load_yaml, form.yaml_box, [*form_inputs, message], **PRIVATE)
    form.upload_yaml_button.upload(
        handlers.on_upload_yaml, form.upload_yaml_button, [form.yaml_box, *form_inputs, message], **PRIVATE
    )
    form.export_yaml_button.click(
        handlers.on_export_yaml, form_inputs, [form.yaml_box, form.export_file, message], **PRIVATE
    )


def _form_component(
    form_field: FormField, value: Any, devices: Sequence[str], env_choices: Sequence[str], visible: bool = True
):
    """The control for one config key: its kind's component, labelled with the key and its help
    (an Advanced one hidden while another algorithm than its own is chosen)."""
    label, info = form_field.key, form_field.help
    elem_id = "field-" + form_field.key.replace(".", "-").replace("_", "-")
    small = {} if form_field.basic else {"min_width": 100, "visible": visible}
    if form_field.key == "env_name":
        return gr.Dropdown(
            env_choices,
            value=value,
            label="environment (env_name)",
            allow_custom_value=True,
            info="A built-in game, or type any Gymnasium id (e.g. Acrobot-v1)",
            elem_id=elem_id,
        )
    if form_field.key == "device":
        return gr.Dropdown(
            list(devices),
            value=value,
            label=label,
            allow_custom_value=True,
            info="auto: the GPU when there is one, else the CPU",
            elem_id=elem_id,
        )
    if form_field.key == "nproc_per_node":
        label = "processes (nproc_per_node)"
    if form_field.key == "local_actors":
        label = "actors on this machine (local_actors)"
    if form_field.key == "model_type":
        return gr.Dropdown(
            list(form_field.choices),
            value=value,
            label="model (model_type)",
            info="Policy network size; ppo-cnn for image observations",
            elem_id=elem_id,
        )
    if form_field.kind == "bool":
        return gr.Checkbox(value=bool(value), label=label, info=info, elem_id=elem_id, **small)
    if form_field.kind == "choice":
        return gr.Dropdown(list(form_field.choices), value=value, label=label, info=info, elem_id=elem_id, **small)
    if form_field.kind == "int":
        return gr.Number(value=value, label=label, info=info, precision=0, elem_id=elem_id, **small)
    if form_field.kind == "float":
        return gr.Number(value=value, label=label, info=info, elem_id=elem_id, **small)
    return gr.Textbox(
        value=value, label=label, info=info, elem_id=elem_id, placeholder="YAML, e.g. {key: value}", **small
    )
