package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONWriter;
import java.util.List;
import java.util.Map;

/**
 * JSON text of a value as runtrail writes it (compact, keys in order, nulls kept, UTF-8 not
 * escaped), and the plain-JSON form of any payload object. Why fastjson2: it is what ai4j uses
 * to write and hash its events, so a payload's JSON here is the JSON ai4j itself sees.
 */
final class JsonText {
  private JsonText() {}

  static String dump(Object value) {
    checkFinite(value, "");
    return JSON.toJSONString(value, JSONWriter.Feature.WriteMapNullValue);
  }

  /** A payload (an ai4j bean, a Map, a String…) as plain JSON values (JSONObject, List…). */
  static Object plain(Object payload) {
    if (payload == null || payload instanceof String || payload instanceof Boolean) {
      return payload;
    }
    return JSON.parse(JSON.toJSONString(payload));
  }

  /** JSON has no NaN or infinity: refuse them by path, as runtrail's limits do (NonFinite). */
  static void checkFinite(Object value, String path) {
    if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (!Double.isFinite(d)) {
        throw new WireEncoder.DoesNotFit((path.isEmpty() ? "value" : path) + ": not a finite number (" + d + ")");
      }
    } else if (value instanceof Map) {
      for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
        checkFinite(e.getValue(), path.isEmpty() ? String.valueOf(e.getKey()) : path + "." + e.getKey());
      }
    } else if (value instanceof List) {
      int i = 0;
      for (Object item : (List<?>) value) {
        checkFinite(item, path + "[" + (i++) + "]");
      }
    }
  }
}
