package dev.runtrail.ai4j;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HexFormat;
import java.util.Set;

/**
 * Files and folders only their owner reads (0600, 0700), written the ways
 * {@code runtrail.files} writes them: a folder's missing parents made 0700, a file created
 * exclusively, a file replaced atomically (with or without fsync).
 */
final class PrivateFiles {
  static final FileAttribute<Set<PosixFilePermission>> FILE =
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));
  private static final FileAttribute<Set<PosixFilePermission>> DIR =
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));
  private static final long PID = ProcessHandle.current().pid();

  private PrivateFiles() {}

  /** Create {@code folder} and its missing parents as 0700 folders (existing ones are left). */
  static Path dir(Path folder) throws IOException {
    Deque<Path> missing = new ArrayDeque<>();
    for (Path probe = folder.toAbsolutePath(); probe != null && !Files.exists(probe); probe = probe.getParent()) {
      missing.push(probe);
    }
    for (Path created : missing) {
      try {
        Files.createDirectory(created, DIR);
      } catch (FileAlreadyExistsException exc) {
        // made by another process meanwhile
      }
    }
    return folder;
  }

  /** Open a file for writing, creating it 0600 (an existing file keeps its mode). */
  static FileChannel open(Path path, OpenOption... options) throws IOException {
    Set<OpenOption> all = new java.util.HashSet<>(Set.of(options));
    all.add(StandardOpenOption.WRITE);
    return FileChannel.open(path, all, FILE);
  }

  static void writeAll(FileChannel out, byte[] data) throws IOException {
    ByteBuffer buf = ByteBuffer.wrap(data);
    while (buf.hasRemaining()) {
      out.write(buf);
    }
  }

  /** Write {@code data} to a new file; FileAlreadyExistsException when it exists (a race lost). */
  static void createExclusive(Path path, byte[] data, boolean fsync) throws IOException {
    try (FileChannel out = open(path, StandardOpenOption.CREATE_NEW)) {
      writeAll(out, data);
      if (fsync) {
        out.force(true);
      }
    }
  }

  /**
   * Replace {@code path} with {@code data} so a reader sees the old file or the new one: a
   * hidden file beside it, renamed over it; with {@code fsync} the file and then its folder are
   * made durable ({@code runtrail.files.write_atomic}).
   */
  static void replace(Path path, byte[] data, boolean fsync) throws IOException {
    String name = path.getFileName().toString();
    Path beside = fsync
        ? path.resolveSibling("." + name + "." + PID + "." + HexFormat.of().formatHex(Sealing.randomBytes(4)) + ".tmp")
        : path.resolveSibling("." + name + "." + PID);
    try {
      try (FileChannel out = open(beside, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING)) {
        writeAll(out, data);
        if (fsync) {
          out.force(true);
        }
      }
      Files.move(beside, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } catch (IOException | RuntimeException exc) {
      Files.deleteIfExists(beside);
      throw exc;
    }
    if (fsync) {
      syncDir(path.getParent());
    }
  }

  /** Make a folder's entries durable (a file created or renamed in it survives a power cut). */
  static void syncDir(Path folder) throws IOException {
    try (FileChannel dir = FileChannel.open(folder, StandardOpenOption.READ)) {
      dir.force(true);
    }
  }
}
