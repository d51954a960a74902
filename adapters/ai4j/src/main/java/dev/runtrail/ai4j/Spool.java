package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONArray;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;

/**
 * Where events wait while the broker cannot take them: an append-only file per listener and
 * topic, {@code <dir>/<tenant>/<topic>.ai4j.spool} (the next {@code .ai4j.<n>.spool} when another
 * listener holds it), in the Python publisher's line format (JSON: base64 key, value, headers,
 * event ID; {@code runtrail.publisher.legacy_spool.parse_line}), so a resend is byte-identical. Its
 * own file name, because Java's file locks are not the {@code flock} the Python publisher takes.
 * Folder 0700, file 0600: the events are the agent's data.
 */
final class Spool implements AutoCloseable {
  private static final int MAX_SLOTS = 64;
  private static final long READ_CHUNK = 8L << 20;
  private final Path path;
  private final FileChannel channel;
  private final FileLock lock;
  private int depth;

  /** One record read back, with the byte offset just past it. */
  record Entry(ProducerRecord<byte[], byte[]> record, long end) {}

  private Spool(Path path, FileChannel channel, FileLock lock) throws IOException {
    this.path = path;
    this.channel = channel;
    this.lock = lock;
    repairTail();
    this.depth = read(Long.MAX_VALUE, "").size();
  }

  static Spool open(Path dir, String tenant, String topic) throws IOException {
    Path folder = dir.resolve(pathComponent(tenant));
    Files.createDirectories(folder);
    Files.setPosixFilePermissions(folder, PosixFilePermissions.fromString("rwx------"));
    String base = pathComponent(topic);
    for (int slot = 0; slot < MAX_SLOTS; slot++) {
      Path file = folder.resolve(slot == 0 ? base + ".ai4j.spool" : base + ".ai4j." + slot + ".spool");
      FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE);
      Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"));
      FileLock lock;
      try {
        lock = ch.tryLock();
      } catch (OverlappingFileLockException exc) {
        lock = null;
      }
      if (lock != null) {
        return new Spool(file, ch, lock);
      }
      ch.close();
    }
    throw new IOException("all " + MAX_SLOTS + " spool slots of " + topic + " in " + folder + " are in use");
  }

  /** {@code name} as one safe path component, as {@code runtrail.publisher.spool_record.path_component}. */
  static String pathComponent(String name) {
    StringBuilder out = new StringBuilder();
    name.codePoints().forEach(c -> {
      if (c < 128 && (Character.isLetterOrDigit(c) || c == '-' || c == '_')) {
        out.appendCodePoint(c);
      } else {
        for (byte b : new String(Character.toChars(c)).getBytes(StandardCharsets.UTF_8)) {
          out.append(String.format("%%%02X", b & 0xff));
        }
      }
    });
    return out.length() == 0 ? "_" : out.toString();
  }

  Path path() {
    return path;
  }

  synchronized int depth() {
    return depth;
  }

  synchronized long size() throws IOException {
    return channel.size();
  }

  synchronized void append(ProducerRecord<byte[], byte[]> record, String eventId) throws IOException {
    Map<String, Object> doc = new LinkedHashMap<>();
    Base64.Encoder b64 = Base64.getEncoder();
    doc.put("k", record.key() == null ? null : b64.encodeToString(record.key()));
    doc.put("v", b64.encodeToString(record.value()));
    JSONArray headers = new JSONArray();
    for (Header h : record.headers()) {
      headers.add(List.of(h.key(), b64.encodeToString(h.value())));
    }
    doc.put("h", headers);
    doc.put("id", eventId);
    ByteBuffer line = ByteBuffer.wrap((JSON.toJSONString(doc, com.alibaba.fastjson2.JSONWriter.Feature.WriteMapNullValue) + "\n").getBytes(StandardCharsets.UTF_8));
    long at = channel.size();
    try {
      while (line.hasRemaining()) {
        channel.write(line, at + line.position());
      }
    } catch (IOException exc) {
      channel.truncate(at); // never leave half a line behind
      throw exc;
    }
    depth++;
  }

  /** Up to {@code max} records from the start, for {@code topic}. */
  synchronized List<Entry> read(long max, String topic) throws IOException {
    long size = channel.size();
    // a chunk at a time (retried every second while spooling): 8 MiB, more only for a longer line
    long want = Math.min(size, max == Long.MAX_VALUE ? size : READ_CHUNK);
    byte[] bytes = readPrefix(want);
    while (want < size && indexOf(bytes, (byte) '\n') < 0) {
      want = Math.min(size, want * 2);
      bytes = readPrefix(want);
    }
    List<Entry> out = new ArrayList<>();
    int start = 0;
    Base64.Decoder b64 = Base64.getDecoder();
    for (int i = 0; i < bytes.length && out.size() < max; i++) {
      if (bytes[i] != '\n') {
        continue;
      }
      JSONObject doc = JSON.parseObject(new String(bytes, start, i - start, StandardCharsets.UTF_8));
      String key = doc.getString("k");
      ProducerRecord<byte[], byte[]> record =
          new ProducerRecord<>(topic, key == null ? null : b64.decode(key), b64.decode(doc.getString("v")));
      for (Object h : doc.getJSONArray("h")) {
        JSONArray pair = (JSONArray) h;
        record.headers().add(pair.getString(0), b64.decode(pair.getString(1)));
      }
      out.add(new Entry(record, i + 1));
      start = i + 1;
    }
    return out;
  }

  private byte[] readPrefix(long length) throws IOException {
    ByteBuffer buf = ByteBuffer.allocate((int) Math.min(length, Integer.MAX_VALUE - 8));
    while (buf.hasRemaining() && channel.read(buf, buf.position()) > 0) {
      // read until the buffer is full
    }
    return buf.array();
  }

  private static int indexOf(byte[] bytes, byte b) {
    for (int i = 0; i < bytes.length; i++) {
      if (bytes[i] == b) {
        return i;
      }
    }
    return -1;
  }

  /** Drop the first {@code records} records ({@code bytes} long): they reached the broker. */
  synchronized void dropPrefix(long bytes, int records) throws IOException {
    long size = channel.size();
    ByteBuffer tail = ByteBuffer.allocate((int) (size - bytes));
    while (tail.hasRemaining() && channel.read(tail, bytes + tail.position()) > 0) {
      // read the whole tail
    }
    tail.flip();
    channel.truncate(0);
    while (tail.hasRemaining()) {
      channel.write(tail, tail.position());
    }
    channel.force(false);
    depth -= records;
  }

  synchronized void sync() throws IOException {
    channel.force(false);
  }

  private void repairTail() throws IOException {
    long size = channel.size();
    if (size == 0) {
      return;
    }
    byte[] bytes = readPrefix(size);
    int end = bytes.length;
    while (end > 0 && bytes[end - 1] != '\n') {
      end--;
    }
    if (end != bytes.length) {
      channel.truncate(end); // a torn last line (a crash mid-append)
    }
  }

  @Override
  public synchronized void close() throws IOException {
    channel.force(false);
    lock.release();
    channel.close();
  }
}
