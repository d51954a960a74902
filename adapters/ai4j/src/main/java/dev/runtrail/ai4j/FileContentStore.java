package dev.runtrail.ai4j;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The embedded content store's writing side, the Java twin of
 * {@code runtrail.privacy.content_file.FileContentStore}: one append-only segment per data key,
 * {@code <tenant>/<keyId>/objects.seg} (0600, folders 0700), a record being {@code RTO1}, the
 * object's digest (64 hex characters), its length (8 bytes, big-endian) and the sealed bytes,
 * written by one write on an {@code O_APPEND} descriptor so the records of several writers (a
 * Python publisher, this adapter) never interleave. The Python side reads, prunes and erases.
 */
final class FileContentStore implements AutoCloseable {
  static final String DEFAULT_NAME = "main";
  static final String SEGMENT = "objects.seg";
  static final byte[] MAGIC = "RTO1".getBytes(StandardCharsets.US_ASCII);
  /** Most segment descriptors kept open for appending (one per subject being written). */
  static final int MAX_OPEN = 256;

  private final Path root;
  private final String name;
  private final boolean fsync;
  private final LinkedHashMap<Path, FileChannel> open = new LinkedHashMap<>(16, 0.75f, true);

  FileContentStore(Path root, String name, boolean fsync) throws IOException {
    this.root = PrivateFiles.dir(root);
    this.name = name;
    this.fsync = fsync;
  }

  /** {@code file:///dir[?name=…&fsync=true]}, as {@code FileContentStore.from_url}. */
  static FileContentStore fromUrl(String url) throws IOException {
    StoreUrl parsed = StoreUrl.parse(url, "content store");
    String name = parsed.pop("name", DEFAULT_NAME);
    boolean fsync = parsed.popBool("fsync");
    parsed.rejectUnknown("content store");
    return new FileContentStore(parsed.folder(), name, fsync);
  }

  /** What references written through this store name as their {@code store}. */
  String name() {
    return name;
  }

  /** Append one sealed object of {@code tenant}'s data key {@code keyId} under its digest. */
  synchronized void put(String tenant, String keyId, String digest, byte[] blob) throws IOException {
    Path segment = root.resolve(PathSegment.of(tenant)).resolve(keyId).resolve(SEGMENT);
    ByteBuffer record = ByteBuffer.allocate(MAGIC.length + 64 + 8 + blob.length);
    record.put(MAGIC).put(digest.getBytes(StandardCharsets.US_ASCII)).putLong(blob.length).put(blob).flip();
    FileChannel out = open.get(segment);
    if (out == null) {
      out = append(segment);
    }
    int wrote = out.write(record);
    if (record.hasRemaining()) { // a regular file takes the whole record in one write
      throw new IOException("short write to " + segment + " (" + wrote + " of " + record.limit() + " bytes)");
    }
    if (fsync) {
      out.force(true);
    }
  }

  private FileChannel append(Path segment) throws IOException {
    PrivateFiles.dir(segment.getParent());
    FileChannel out = PrivateFiles.open(segment, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    open.put(segment, out);
    Iterator<Map.Entry<Path, FileChannel>> oldest = open.entrySet().iterator();
    while (open.size() > MAX_OPEN) {
      oldest.next().getValue().close();
      oldest.remove();
    }
    return out;
  }

  @Override
  public synchronized void close() throws IOException {
    for (FileChannel out : open.values()) {
      out.close();
    }
    open.clear();
  }
}
