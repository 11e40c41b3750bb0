"""The lm-eval task class of every PropMe task: what a chat template and a few-shot run mean for it.

lm-eval builds every task's requests with the run's `--apply_chat_template`, `--system_instruction`
and `--num_fewshot`; PropMe's prompts are measurements and must reach the model as the method
defines them (docs/method.md, chat models):

* few-shot: the templates pin `num_fewshot: 0`, so lm-eval keeps PropMe's prompts clean whatever
  `--num_fewshot` says (it says so in its log; the results table shows n-shot 0). A task set to
  more shots some other way (the Python API) is refused here.
* a chat template: `generic` and `specific` are ordinary user messages. The prompt, without
  PropMe's start token (the template writes the model's own), becomes the user turn and the model
  answers in the assistant turn. `prefix` (a continuation attack), the prompt-free settings and
  the likelihood subtask are defined on raw text only; lm-eval applies the template to every task
  of a run, so they are refused with one message naming the two runs to make instead.
* `--system_instruction` without a chat template would be pasted as text before the raw prompt:
  refused. With a chat template it is the system turn of the generic and specific prompts.

Every logged document records whether the template was applied (`TaskDocument.chat_template`).
After lm-eval's filters the class traces the task's generations in bulk (`apply_filters`), before
lm-eval scores its documents.
"""
from __future__ import annotations

from typing import Any

from lm_eval.api.task import ConfigurableTask

from propme_metrics.prompts.settings import LIKELIHOOD, MEASURE_KEY, Setting, task_name
from propme_metrics.trace.task_document import TaskDocument

from .hooks import process_results, trace_task
from .schema import TaskConfigError

#: the settings that are questions a user could put to an assistant: defined under a chat template
CHAT_SETTINGS = (Setting.GENERIC, Setting.SPECIFIC)


class PropMeTask(ConfigurableTask):
    """A ConfigurableTask that checks the run's prompt formatting before building any request."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # lm-eval hands a `class:` task its whole YAML, `class` included; TaskConfig has no such field
        super().__init__(config={k: v for k, v in (config or {}).items() if k != "class"}, **kwargs)

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """The dataset from PropMe's loader, as lm-eval's own `download` calls a `custom_dataset`,
        without its advice to pass options by `--metadata` (docs/configuration.md lists PropMe's)."""
        self.dataset = self.config.custom_dataset(**(self.config.metadata or {}), **(self.config.dataset_kwargs or {}))

    def _meta(self, key: str) -> Any:
        meta = self.config.metadata
        return meta.get(key) if isinstance(meta, dict) else None

    def build_all_requests(self, *, apply_chat_template: bool = False, system_instruction: str | None = None,
                           **kwargs: Any) -> None:
        name, setting = self.config.task, self._meta("setting")
        shots = self.config.num_fewshot or 0
        if shots:
            raise TaskConfigError(f"{name} was set to {shots} few-shot examples: PropMe's prompts are measurements "
                                  "and take no examples before them",
                                  "leave num_fewshot at 0 for PropMe's tasks (the task YAML pins it)")
        if system_instruction and not apply_chat_template:
            raise TaskConfigError(f"{name}: --system_instruction without --apply_chat_template would be pasted "
                                  "before PropMe's raw prompt as text",
                                  "drop --system_instruction, or use it with --apply_chat_template on the "
                                  "generic and specific subtasks")
        if apply_chat_template:
            if setting not in CHAT_SETTINGS or self._meta(MEASURE_KEY) == LIKELIHOOD:
                corpus = self._meta("corpus")
                raise TaskConfigError(
                    f"{name} is not defined under --apply_chat_template: the {setting} setting"
                    + (" scored by likelihood" if self._meta(MEASURE_KEY) == LIKELIHOOD else "")
                    + " gives the model raw text (a document's start or nothing), not a user message",
                    f"make two runs: --apply_chat_template --tasks {','.join(task_name(corpus, s) for s in CHAT_SETTINGS)}, "
                    f"and the other subtasks without --apply_chat_template (docs/configuration.md, chat models)")
            split = self.config.test_split
            # the user turn holds the prompt alone: the chat template writes the model's own start
            self.dataset[split] = self.dataset[split].map(
                lambda doc: TaskDocument.from_row(doc).under_chat_template().to_row())
        super().build_all_requests(apply_chat_template=apply_chat_template, system_instruction=system_instruction,
                                   **kwargs)

    def apply_filters(self) -> Any:
        """lm-eval's filters, then every generation of the task traced in one bulk call, before lm-eval
        scores its documents (`hooks.trace_task`): their items are final values, numbers in the samples."""
        out = super().apply_filters()
        if self.config.process_results is process_results and self.instances:  # PropMe's traced generations
            trace_task(self.instances)
        return out
