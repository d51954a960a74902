package runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import com.alibaba.fastjson2.JSONWriter;
import io.github.lnyocly.ai4j.agent.Agent;
import io.github.lnyocly.ai4j.agent.AgentRequest;
import io.github.lnyocly.ai4j.agent.Agents;
import io.github.lnyocly.ai4j.agent.event.AgentEvent;
import io.github.lnyocly.ai4j.agent.event.AgentEventType;
import io.github.lnyocly.ai4j.agent.model.AgentModelClient;
import io.github.lnyocly.ai4j.agent.model.AgentModelResult;
import io.github.lnyocly.ai4j.agent.model.AgentModelStreamListener;
import io.github.lnyocly.ai4j.agent.model.AgentPrompt;
import io.github.lnyocly.ai4j.agent.replay.IoCaptureAgentListener;
import io.github.lnyocly.ai4j.agent.replay.JsonlIoCaptureSink;
import io.github.lnyocly.ai4j.agent.tool.AgentToolCall;
import io.github.lnyocly.ai4j.agent.tool.AgentToolResult;
import io.github.lnyocly.ai4j.agent.tool.StaticToolRegistry;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Two modes, JSON on stdin/stdout, so the Python conformance test can compare ai4j with runtrail.
 *
 * <p>{@code capture}: stdin {"sequences": [{"name", "events": [{type, runId, sessionId, turnId,
 * step, message, payload}]}]}. Each sequence goes, as ai4j {@link AgentEvent}s built from ai4j's
 * own payload classes, through a fresh {@link IoCaptureAgentListener} writing a
 * {@link JsonlIoCaptureSink}; stdout is {name: [record, ...]} with the sink's own JSON lines.
 *
 * <p>{@code emit}: runs ai4j's real ReAct runtime, streaming, with a scripted model (a retry,
 * reasoning, two text deltas, a tool call, then a final answer) and a scripted tool (one success,
 * one failure), and prints every event it published: type, step, message, the payload's JSON form
 * and {@code JSON.toJSONString(event)} (what ai4j's audit chain hashes).
 */
public final class Harness {
  private Harness() {}

  public static void main(String[] args) throws Exception {
    String mode = args.length > 0 ? args[0] : "capture";
    String out;
    if (mode.equals("capture")) {
      out = capture(JSON.parseObject(readStdin()));
    } else if (mode.equals("emit")) {
      out = emit();
    } else {
      throw new IllegalArgumentException("mode must be capture or emit, not " + mode);
    }
    System.out.write(out.getBytes(StandardCharsets.UTF_8));
    System.out.flush();
  }

  private static String readStdin() throws Exception {
    InputStream in = System.in;
    return new String(in.readAllBytes(), StandardCharsets.UTF_8);
  }

  // --- capture ----------------------------------------------------------------------------
  static String capture(JSONObject input) throws Exception {
    JSONObject result = new JSONObject();
    Path dir = Files.createTempDirectory("ai4j-capture");
    int n = 0;
    for (Object item : input.getJSONArray("sequences")) {
      JSONObject sequence = (JSONObject) item;
      Path file = dir.resolve("seq-" + (n++) + ".jsonl");
      JsonlIoCaptureSink sink = new JsonlIoCaptureSink(file);
      IoCaptureAgentListener listener = new IoCaptureAgentListener(sink);
      for (Object e : sequence.getJSONArray("events")) {
        listener.onEvent(toAgentEvent((JSONObject) e));
      }
      sink.close();
      JSONArray records = new JSONArray();
      for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
        if (!line.isBlank()) {
          records.add(JSON.parseObject(line));
        }
      }
      Files.delete(file);
      result.put(sequence.getString("name"), records);
    }
    Files.delete(dir);
    return JSON.toJSONString(result, JSONWriter.Feature.WriteMapNullValue);
  }

  /** An ai4j event whose payload is the class ai4j's runtime really puts there. */
  static AgentEvent toAgentEvent(JSONObject e) {
    AgentEventType type = AgentEventType.valueOf(e.getString("type"));
    Object payload = e.get("payload");
    Object typed;
    switch (type) {
      case MODEL_REQUEST:
        typed = payload == null ? null : JSON.parseObject(JSON.toJSONString(payload), AgentPrompt.class);
        break;
      case TOOL_CALL:
        typed = payload == null ? null : JSON.parseObject(JSON.toJSONString(payload), AgentToolCall.class);
        break;
      case TOOL_RESULT:
        typed = payload == null ? null : JSON.parseObject(JSON.toJSONString(payload), AgentToolResult.class);
        break;
      default:
        typed = payload; // MODEL_RETRY: a Map; MODEL_RESPONSE: the raw response; others: as given
    }
    return AgentEvent.builder()
        .eventId(e.getString("eventId"))
        .runId(e.getString("runId"))
        .sessionId(e.getString("sessionId"))
        .turnId(e.getString("turnId"))
        .type(type)
        .step(e.getInteger("step"))
        .message(e.getString("message"))
        .payload(typed)
        .build();
  }

  // --- emit -------------------------------------------------------------------------------
  static String emit() throws Exception {
    List<AgentEvent> events = new ArrayList<>();
    Agent agent =
        Agents.react()
            .model("gpt-4o-mini")
            .instructions("answer briefly")
            .temperature(0.2)
            .options(io.github.lnyocly.ai4j.agent.AgentOptions.builder().stream(true).build())
            .modelClient(new ScriptedModel())
            .toolRegistry(new StaticToolRegistry(List.of(weatherTool())))
            .toolExecutor(
                call -> {
                  if ("fail".equals(call.getName())) {
                    throw new IllegalStateException("tool exploded");
                  }
                  return "{\"tempC\":21}";
                })
            .codeExecutor(request -> {
              throw new UnsupportedOperationException("the ReAct runtime runs no code");
            })
            .build();
    Map<String, Object> metadata = new LinkedHashMap<>();
    metadata.put(AgentRequest.METADATA_KEY_RUN_ID, "run-emit");
    metadata.put(AgentRequest.METADATA_KEY_TURN_ID, "turn-1");
    metadata.put(AgentRequest.METADATA_KEY_SESSION_ID, "sess-1");
    agent.runStream(new AgentRequest("weather in Paris?", metadata), events::add);
    JSONArray out = new JSONArray();
    for (AgentEvent event : events) {
      JSONObject row = new JSONObject();
      row.put("type", event.getType().name());
      row.put("step", event.getStep());
      row.put("runId", event.getRunId());
      row.put("turnId", event.getTurnId());
      row.put("sessionId", event.getSessionId());
      row.put("message", event.getMessage());
      row.put("payloadClass", event.getPayload() == null ? null : event.getPayload().getClass().getName());
      row.put("payload", event.getPayload() == null ? null : JSON.parse(JSON.toJSONString(event.getPayload())));
      row.put("eventJson", JSON.toJSONString(event));
      out.add(row);
    }
    return JSON.toJSONString(out, JSONWriter.Feature.WriteMapNullValue);
  }

  static Map<String, Object> weatherTool() {
    Map<String, Object> fn = new LinkedHashMap<>();
    fn.put("name", "weather");
    fn.put("description", "current weather");
    fn.put("parameters", Map.of("type", "object", "properties", Map.of("city", Map.of("type", "string"))));
    Map<String, Object> tool = new LinkedHashMap<>();
    tool.put("type", "function");
    tool.put("function", fn);
    return tool;
  }

  /** Call 1: retry, reasoning, deltas, two tool calls (one fails). Call 2: the final answer. */
  static final class ScriptedModel implements AgentModelClient {
    private int calls;

    @Override
    public AgentModelResult create(AgentPrompt prompt) {
      throw new UnsupportedOperationException("the harness runs streaming");
    }

    @Override
    public AgentModelResult createStream(AgentPrompt prompt, AgentModelStreamListener listener) {
      calls++;
      if (calls == 1) {
        listener.onRetry("rate limited", 1, 3, new RuntimeException("429 Too Many Requests"));
        listener.onReasoningDelta("look up");
        listener.onReasoningDelta(" the weather");
        listener.onDeltaText("Let me ");
        listener.onDeltaText("check.");
        AgentToolCall call =
            AgentToolCall.builder().name("weather").callId("call_1").arguments("{\"city\":\"Paris\"}").type("function").build();
        AgentToolCall bad =
            AgentToolCall.builder().name("fail").callId("call_2").arguments("{}").type("function").build();
        listener.onToolCall(call);
        listener.onToolCall(bad);
        Map<String, Object> raw = new LinkedHashMap<>();
        raw.put("id", "resp_1");
        raw.put("usage", Map.of("prompt_tokens", 12, "completion_tokens", 5));
        return AgentModelResult.builder()
            .reasoningText("look up the weather")
            .outputText("Let me check.")
            .toolCalls(List.of(call, bad))
            .rawResponse(raw)
            .inputTokens(12L)
            .outputTokens(5L)
            .build();
      }
      listener.onDeltaText("It is 21C.");
      Map<String, Object> raw = new LinkedHashMap<>();
      raw.put("id", "resp_2");
      raw.put("usage", Map.of("prompt_tokens", 30, "completion_tokens", 4));
      return AgentModelResult.builder().outputText("It is 21C.").rawResponse(raw).build();
    }
  }
}
