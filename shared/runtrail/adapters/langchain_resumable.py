"""Resumable LangChain chat models and tools: a re-run of a crashed run repeats no side effect.

:class:`ResumableRun` binds one runtrail run to LangChain: its :attr:`~ResumableRun.handler`
(the callback handler, sharing the run's recorder), :meth:`~ResumableRun.chat_model` and
:meth:`~ResumableRun.tools` wrap the agent's model and tools in the resume cache's semantics —
the same :class:`ResumableModelClient` and :class:`ResumableToolExecutor` the rest of runtrail
uses, so the keys are content addresses (the prompt of :func:`chat_prompt`; a tool's name and
arguments), a tool's intent is acknowledged before it runs, and a call recorded without its
result raises :class:`~runtrail.resume.OutcomeUnknown` (unless idempotent or reconciled).

The wrappers publish their own MODEL_* / TOOL_* events, on a miss only (the handler skips runs
tagged :data:`RESUMABLE_TAG`), so a step replayed from the cache adds nothing to the record.
The wrapped model is called through its ``_generate`` (not ``invoke``), so its own callbacks do
not record the call a second time. Streaming is not replayed (seed 000 §3.4): a hit returns the
whole message at once.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, cast

from langchain_core.callbacks import CallbackManagerForLLMRun, CallbackManagerForToolRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field

from runtrail.adapters.langchain import RESUMABLE_TAG, RuntrailCallbackHandler
from runtrail.adapters.langchain_json import (
    chat_prompt,
    jsonable,
    message_json,
    model_name,
    response_raw,
    response_text,
)
from runtrail.adapters.langchain_recorder import AdapterRecorder
from runtrail.config import Settings
from runtrail.resume import (
    CacheSource,
    ModelResult,
    ReconcileHook,
    ResumableModelClient,
    ResumableToolExecutor,
    ResumeCache,
    ToolInvocation,
)
from runtrail.resume.recorder import EventPublisher

_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runtrail_tool_call_id", default=None
)
_current_call: contextvars.ContextVar[ToolInvocation | None] = contextvars.ContextVar(
    "runtrail_tool_invocation", default=None
)


def current_tool_call() -> ToolInvocation | None:
    """Inside a wrapped tool: the call being executed (call ID, step, and the idempotency key,
    the same in every life of the run), for the tool to hand to the system it changes."""
    return _current_call.get()


def current_idempotency_key() -> str | None:
    """Inside a wrapped tool: the call's idempotency key (see :func:`current_tool_call`)."""
    call = _current_call.get()
    return call.idempotency_key if call is not None else None


# --- the chat model ---------------------------------------------------------------------------
def _unbind(model: Runnable[Any, Any]) -> tuple[BaseChatModel, dict[str, Any]]:
    """The chat model under ``bind_tools``/``bind`` bindings, and the bound call arguments."""
    bound: dict[str, Any] = {}
    while isinstance(model, RunnableBinding):
        bound = {**model.kwargs, **bound}
        model = model.bound
    if not isinstance(model, BaseChatModel):
        raise TypeError(f"expected a chat model (or a binding of one), got {type(model).__name__}")
    return model, bound


class _ChatCall:
    """One real call of the wrapped model, as :class:`ResumableModelClient`'s delegate."""

    def __init__(
        self,
        model: BaseChatModel,
        messages: list[BaseMessage],
        stop: list[str] | None,
        kwargs: dict[str, Any],
    ) -> None:
        self.model, self.messages, self.stop, self.kwargs = model, messages, stop, kwargs

    def create(self, prompt: Any) -> ModelResult:
        result = self.model._generate(self.messages, stop=self.stop, **self.kwargs)
        return ModelResult(message=response_text(result), raw=response_raw(result))


def _message_from(result: ModelResult) -> AIMessage:
    """The AIMessage a (recorded or fresh) result stands for: same content and tool calls."""
    raw = result.raw if isinstance(result.raw, dict) else {}
    generations = raw.get("generations") or [{}]
    form = generations[0] if isinstance(generations[0], dict) else {}
    content = form.get("content", result.message or "")
    calls = [
        {"name": c["name"], "args": c.get("arguments") or {}, "id": c.get("id")}
        for c in form.get("toolCalls") or []
    ]
    usage = raw.get("usage")
    message = AIMessage(content=content, tool_calls=calls)
    if isinstance(usage, dict) and {"input_tokens", "output_tokens"} <= usage.keys():
        message.usage_metadata = {
            "input_tokens": int(usage["input_tokens"]),
            "output_tokens": int(usage["output_tokens"]),
            "total_tokens": int(usage.get("total_tokens", 0)),
        }
    return message


class ResumableChatModel(BaseChatModel):
    """A chat model answered from the resume cache when the run already made this call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Runnable[Any, Any]
    resume_cache: ResumeCache
    recorder: AdapterRecorder
    tags: list[str] | None = Field(default_factory=lambda: [RESUMABLE_TAG])

    @property
    def _llm_type(self) -> str:
        return "runtrail-resumable"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        """Bind the tools to the wrapped model; the result stays resumable."""
        inner, _ = _unbind(self.inner)
        return self.model_copy(update={"inner": inner.bind_tools(tools, **kwargs)})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        model, bound = _unbind(self.inner)
        call = {**bound, **kwargs}
        params = {**model._get_invocation_params(stop=stop), **call}
        name = model_name(params, None, type(model).__name__)
        prompt = chat_prompt(name, messages, params)
        client = ResumableModelClient(
            _ChatCall(model, messages, stop, call), self.resume_cache, recorder=self.recorder
        )
        message = _message_from(client.create(prompt))
        return ChatResult(generations=[ChatGeneration(message=message)])


# --- tools ------------------------------------------------------------------------------------
class _ToolDispatch:
    """:class:`ResumableToolExecutor`'s delegate: runs the wrapped tool, its callbacks off (the
    wrapper's run is the one recorded), with the idempotency key in context."""

    def __init__(self) -> None:
        self.tools: dict[str, BaseTool] = {}

    def execute(self, call: ToolInvocation) -> Any:
        tool = self.tools.get(call.tool_name)
        if tool is None:
            raise KeyError(f"no wrapped tool named {call.tool_name!r}")
        token = _current_call.set(call)
        try:
            output = tool.invoke(call.arguments, config={"callbacks": []})
        finally:
            _current_call.reset(token)
        return jsonable(output)


class ResumableTool(BaseTool):
    """A tool executed through :class:`ResumableToolExecutor`: a hit returns the recorded
    output, an open intent raises OutcomeUnknown (or reconciles), a miss runs it intent-first."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    executor: ResumableToolExecutor
    recorder: AdapterRecorder
    tags: list[str] | None = Field(default_factory=lambda: [RESUMABLE_TAG])

    def run(self, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kw: Any) -> Any:
        token = _call_id.set(tool_call_id)
        try:
            return super().run(tool_input, *args, tool_call_id=tool_call_id, **kw)
        finally:
            _call_id.reset(token)

    def _run(
        self, *args: Any, run_manager: CallbackManagerForToolRun | None = None, **kw: Any
    ) -> Any:
        arguments: Any = jsonable(kw) if not args else jsonable(args[0] if len(args) == 1 else args)
        call = ToolInvocation(
            self.inner.name,
            arguments,
            _call_id.get(),
            self.recorder.step,
            self.recorder.turn_id,
        )
        return self.executor.execute(call)


# --- one run ----------------------------------------------------------------------------------
class ResumableRun:
    """One runtrail run driven through LangChain/LangGraph, resumable across processes."""

    def __init__(
        self,
        publisher: EventPublisher,
        cache: ResumeCache,
        *,
        session_id: str | None = None,
        turn_id: str = "turn-1",
        resumed: bool | None = None,
        idempotent: Collection[str] | Callable[[str], bool] = (),
        reconcile: ReconcileHook | None = None,
        lifecycle: bool = True,
    ) -> None:
        """``resumed``: an earlier life opened the run (default: the cache is not a fresh
        run's). ``turn_id`` is fixed so every life places its events alike."""
        self.cache = cache
        self.recorder = AdapterRecorder(
            publisher, cache.run_id, session_id=session_id, turn_id=turn_id
        )
        self.handler = RuntrailCallbackHandler(
            publisher,
            recorder=self.recorder,
            session_id=session_id,
            turn_id=turn_id,
            lifecycle=lifecycle,
            resumed=(not cache.fresh_run) if resumed is None else resumed,
            wait_for_acks=True,
        )
        self._dispatch = _ToolDispatch()
        self.executor = ResumableToolExecutor(
            self._dispatch,
            cache,
            recorder=self.recorder,
            idempotent=idempotent,
            reconcile=reconcile,
        )

    @property
    def run_id(self) -> str:
        return self.cache.run_id

    def config(self, **extra: Any) -> RunnableConfig:
        """The run's LangChain config: this handler among the callbacks, plus ``extra``."""
        config: dict[str, Any] = {**extra, "callbacks": [self.handler, *extra.get("callbacks", [])]}
        return cast(RunnableConfig, config)

    def chat_model(self, model: Runnable[Any, Any]) -> ResumableChatModel:
        _unbind(model)  # fail now, not at the first call
        return ResumableChatModel(inner=model, resume_cache=self.cache, recorder=self.recorder)

    def tools(self, tools: Iterable[BaseTool]) -> list[ResumableTool]:
        wrapped = []
        for tool in tools:
            self._dispatch.tools[tool.name] = tool
            wrapped.append(
                ResumableTool(
                    name=tool.name,
                    description=tool.description,
                    args_schema=tool.args_schema,
                    inner=tool,
                    executor=self.executor,
                    recorder=self.recorder,
                )
            )
        return wrapped


def open_run(
    publisher: Any,
    settings: Settings,
    run_id: str,
    remote: CacheSource,
    *,
    session_id: str | None = None,
    idempotent: Collection[str] | Callable[[str], bool] = (),
    reconcile: ReconcileHook | None = None,
) -> ResumableRun:
    """A :class:`ResumableRun` of ``run_id`` — new or an earlier life's, found out here: the
    run's state is fetched from the resume-cache service behind the resume barrier (the end of
    the run's partition now), and the publisher continues the run's sequence."""
    from runtrail.privacy.resolve import resolver_from_settings
    from runtrail.resume.barrier import resume_barrier

    cache = ResumeCache(
        run_id,
        tenant=settings.tenant,
        remote=remote,
        read_your_writes=publisher.acked_offsets,
        resolver=resolver_from_settings(settings) if settings.content_store_url else None,
    )
    state = cache.resume(resume_barrier(settings, run_id))
    publisher.set_next_sequence(run_id, state.last_sequence + 1)
    return ResumableRun(
        publisher,
        cache,
        session_id=session_id,
        resumed=state.last_sequence > 0,
        idempotent=idempotent,
        reconcile=reconcile,
    )


__all__ = [
    "ResumableChatModel",
    "ResumableRun",
    "ResumableTool",
    "current_idempotency_key",
    "current_tool_call",
    "message_json",
    "open_run",
]
