package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * runtrail's wire format: Avro single-object encoding ({@code C3 01} + the 8-byte
 * little-endian CRC-64-AVRO fingerprint of the writer schema + the Avro binary body), with the
 * committed {@code schemas/runtrail_schemas/*.avsc} shipped in this jar. Why Avro's own encoder: it is the
 * reference implementation of the format runtrail's Python codec (fastavro) reads.
 *
 * <p>Strict like the Python codec: a field the schema does not have, a missing required field
 * or a value of the wrong type is refused with the field's name, never dropped.
 */
public final class WireEncoder {
  /** Marks a data field that carries any JSON value as JSON text (runtrail.events.avro_schemas). */
  static final String JSON_MARK = "runtrail.json";

  private final Map<String, Map<Integer, Writer>> writers = new HashMap<>();

  private static final class Writer {
    final Schema schema;
    final BinaryMessageEncoder<GenericData.Record> encoder;

    Writer(Schema schema) {
      this.schema = schema;
      this.encoder = new BinaryMessageEncoder<>(GenericData.get(), schema);
    }
  }

  /** Thrown when a JSON-form event does not fit its schema; the message names the field. */
  public static final class DoesNotFit extends RuntimeException {
    DoesNotFit(String message) {
      super(message);
    }
  }

  /** Loads the schema of each (type, version) in {@code versions} from this jar's resources. */
  public WireEncoder(Map<String, Integer> versions) {
    for (Map.Entry<String, Integer> e : versions.entrySet()) {
      load(e.getKey(), e.getValue());
    }
  }

  /** The encoder for what the adapter publishes: runtime and run-lifecycle types, current versions. */
  public static WireEncoder forPublishedTypes() {
    return new WireEncoder(EventMapper.PUBLISHED_VERSIONS);
  }

  private void load(String type, int version) {
    String name = "schemas/" + type + ".v" + version + ".avsc";
    try (InputStream in = WireEncoder.class.getResourceAsStream(name)) {
      if (in == null) {
        throw new IllegalStateException("no schema " + name + " in the runtrail-ai4j jar");
      }
      Schema schema = new Schema.Parser().parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
      writers.computeIfAbsent(type, k -> new HashMap<>()).put(version, new Writer(schema));
    } catch (IOException exc) {
      throw new IllegalStateException("cannot read schema " + name, exc);
    }
  }

  /** The 8-byte single-object header fingerprint of (type, version), for tests and tools. */
  public byte[] fingerprint(String type, int version) {
    long fp = org.apache.avro.SchemaNormalization.parsingFingerprint64(writer(type, version).schema);
    return ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(fp).array();
  }

  private Writer writer(String type, Integer version) {
    Map<Integer, Writer> byVersion = writers.get(type);
    Writer w = byVersion == null || version == null ? null : byVersion.get(version);
    if (w == null) {
      throw new DoesNotFit("no schema for event type '" + type + "' v" + version);
    }
    return w;
  }

  /** Single-object encoding of one complete JSON-form event (sequence as a decimal string). */
  public byte[] encode(Map<String, Object> form) {
    Object type = form.get("type");
    Object version = form.get("schemaVersion");
    Writer w = writer(type instanceof String ? (String) type : null,
        version instanceof Number ? ((Number) version).intValue() : null);
    GenericData.Record record = (GenericData.Record) convert(w.schema, form, "", false);
    try {
      ByteBuffer buf = w.encoder.encode(record);
      byte[] out = new byte[buf.remaining()];
      buf.get(out);
      return out;
    } catch (IOException | RuntimeException exc) {
      throw new DoesNotFit("does not fit " + type + " v" + version + ": " + exc.getMessage());
    }
  }

  private static Object convert(Schema schema, Object value, String path, boolean json) {
    switch (schema.getType()) {
      case UNION:
        if (value == null) {
          if (schema.getTypes().stream().anyMatch(s -> s.getType() == Schema.Type.NULL)) {
            return null;
          }
          throw new DoesNotFit(path + ": null where a value is required");
        }
        for (Schema branch : schema.getTypes()) {
          if (branch.getType() != Schema.Type.NULL) {
            return convert(branch, value, path, json);
          }
        }
        throw new DoesNotFit(path + ": a value where the schema allows only null");
      case NULL:
        if (value != null) {
          throw new DoesNotFit(path + ": must be null");
        }
        return null;
      case RECORD:
        return record(schema, value, path);
      case STRING:
        if (json) {
          return JsonText.dump(value);
        }
        if (value instanceof String) {
          return value;
        }
        throw new DoesNotFit(path + ": a string is required, not " + kind(value));
      case LONG:
        if (value instanceof String && path.equals("sequence")) {
          try {
            return Long.parseLong((String) value);
          } catch (NumberFormatException exc) {
            throw new DoesNotFit("sequence: not a decimal integer: " + value);
          }
        }
        return integral(value, path, Long.MIN_VALUE, Long.MAX_VALUE);
      case INT:
        return (int) integral(value, path, Integer.MIN_VALUE, Integer.MAX_VALUE);
      case BOOLEAN:
        if (value instanceof Boolean) {
          return value;
        }
        throw new DoesNotFit(path + ": a boolean is required, not " + kind(value));
      case DOUBLE:
        if (value instanceof Number) {
          double d = ((Number) value).doubleValue();
          if (Double.isFinite(d)) {
            return d;
          }
          throw new DoesNotFit(path + ": not a finite number");
        }
        throw new DoesNotFit(path + ": a number is required, not " + kind(value));
      case ARRAY:
        if (!(value instanceof List)) {
          throw new DoesNotFit(path + ": an array is required, not " + kind(value));
        }
        List<Object> items = new ArrayList<>();
        int i = 0;
        for (Object item : (List<?>) value) {
          items.add(convert(schema.getElementType(), item, path + "[" + (i++) + "]", false));
        }
        return new GenericData.Array<>(schema, items);
      default:
        throw new DoesNotFit(path + ": unsupported Avro type " + schema.getType());
    }
  }

  private static GenericData.Record record(Schema schema, Object value, String path) {
    if (!(value instanceof Map)) {
      throw new DoesNotFit((path.isEmpty() ? "event" : path) + ": an object is required, not " + kind(value));
    }
    Map<?, ?> map = (Map<?, ?>) value;
    GenericData.Record record = new GenericData.Record(schema);
    Set<Object> known = new HashSet<>();
    for (Schema.Field field : schema.getFields()) {
      known.add(field.name());
      String at = path.isEmpty() ? field.name() : path + "." + field.name();
      boolean json = Boolean.TRUE.equals(field.getObjectProp(JSON_MARK));
      record.put(field.pos(), convert(field.schema(), map.get(field.name()), at, json));
    }
    for (Object key : map.keySet()) {
      if (!known.contains(key)) {
        throw new DoesNotFit((path.isEmpty() ? "" : path + ".") + key + ": not a field of " + schema.getName());
      }
    }
    return record;
  }

  private static long integral(Object value, String path, long min, long max) {
    if (value instanceof Integer || value instanceof Long || value instanceof Short || value instanceof Byte) {
      long v = ((Number) value).longValue();
      if (v >= min && v <= max) {
        return v;
      }
    } else if (value instanceof java.math.BigInteger || value instanceof java.math.BigDecimal) {
      try {
        long v = new java.math.BigDecimal(value.toString()).longValueExact();
        if (v >= min && v <= max) {
          return v;
        }
      } catch (ArithmeticException exc) {
        // falls through to the error below
      }
    }
    throw new DoesNotFit(path + ": an integer is required, not " + kind(value) + " " + JSON.toJSONString(value));
  }

  private static String kind(Object value) {
    return value == null ? "null" : value.getClass().getSimpleName();
  }
}
