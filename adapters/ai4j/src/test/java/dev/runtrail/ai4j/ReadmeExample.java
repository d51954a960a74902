package dev.runtrail.ai4j;

import io.github.lnyocly.ai4j.agent.Agent;
import io.github.lnyocly.ai4j.agent.AgentRequest;
import io.github.lnyocly.ai4j.agent.Agents;
import io.github.lnyocly.ai4j.agent.event.AgentEventPublisher;
import io.github.lnyocly.ai4j.agent.codeact.CodeExecutor;
import io.github.lnyocly.ai4j.agent.model.AgentModelClient;
import io.github.lnyocly.ai4j.agent.model.AgentModelResult;
import io.github.lnyocly.ai4j.agent.model.AgentModelStreamListener;
import io.github.lnyocly.ai4j.agent.model.AgentPrompt;
import java.util.List;
import java.util.Map;

/**
 * The README's ai4j example, verbatim between the markers (tests/test_adapter_ai4j_e2e.py
 * checks the README against this file and runs it): args BOOTSTRAP TOPIC RUN_ID.
 */
public final class ReadmeExample {
  private ReadmeExample() {}

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String runId = args[2];
    AgentModelClient modelClient = new Answer(); // your model client
    CodeExecutor codeExecutor = request -> {
      throw new UnsupportedOperationException("no code here");
    };
    // readme:begin
    RuntrailAgentListener runtrail = RuntrailAgentListener.builder()
        .bootstrapServers(bootstrap).topic(topic).tenant("acme").build();
    Agent agent = Agents.react()
        .model("gpt-4o-mini")
        .modelClient(modelClient)
        .codeExecutor(codeExecutor) // ai4j's default one needs GraalVM's SDK
        .eventPublisher(new AgentEventPublisher(List.of(runtrail)))
        .build();
    agent.run(new AgentRequest("weather in Paris?", Map.of(AgentRequest.METADATA_KEY_RUN_ID, runId)));
    runtrail.close(); // flushes; runtrail.stats() counts what was published, skipped or lost
    // readme:end
    System.out.println(com.alibaba.fastjson2.JSON.toJSONString(runtrail.stats()));
    System.exit(0);
  }

  /** A model that answers at once, with usage, as a provider would. */
  static final class Answer implements AgentModelClient {
    @Override
    public AgentModelResult create(AgentPrompt prompt) {
      return AgentModelResult.builder().outputText("It is 21C.")
          .rawResponse(Map.of("id", "resp_1", "usage", Map.of("prompt_tokens", 9, "completion_tokens", 4))).build();
    }

    @Override
    public AgentModelResult createStream(AgentPrompt prompt, AgentModelStreamListener listener) {
      listener.onDeltaText("It is 21C.");
      return create(prompt);
    }
  }
}
