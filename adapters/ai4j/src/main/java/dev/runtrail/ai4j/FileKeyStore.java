package dev.runtrail.ai4j;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONObject;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

/**
 * The embedded key store, the Java twin of {@code runtrail.privacy.keys_file.FileKeyStore}:
 * the same folder, layout and formats, so a data key made here is the one Python finds for the
 * same (tenant, subject), and {@code runtrail erase} shreds it.
 *
 * <pre>
 *   tenants/&lt;tenant&gt;/&lt;n&gt;.key            the tenant key of version n (32 random bytes, fsynced)
 *   data/&lt;tenant&gt;/keys/&lt;keyId&gt;.json     {"tenantKeyVersion": "n", "wrapped": base64(RTC1 blob)}
 *   data/&lt;tenant&gt;/subjects/&lt;h&gt;          the key ID of the subject whose sha256 is h
 * </pre>
 *
 * <p>Two processes (of either language) making the same subject's key race on the subject file,
 * created exclusively: the loser deletes its key file and takes the winner's key. Two making
 * the first tenant key race on {@code 1.key} the same way (the loser makes the next version).
 * This adapter only makes and reads keys: destroying and rotating them is the Python side's.
 */
final class FileKeyStore {
  private final Path root;
  private final Path tenants;
  private final boolean fsync;
  /** (tenant, subject) -> the key this process seals with (no file read per field). */
  private final Map<List<String>, DataKey> sealing = new ConcurrentHashMap<>();

  record DataKey(String keyId, byte[] secret) {}

  FileKeyStore(Path root, boolean fsync) throws IOException {
    this.root = PrivateFiles.dir(root);
    this.tenants = PrivateFiles.dir(root.resolve("tenants"));
    this.fsync = fsync;
  }

  /** {@code file:///dir[?fsync=true]}, as {@code FileKeyStore.from_url}. */
  static FileKeyStore fromUrl(String url) throws IOException {
    StoreUrl parsed = StoreUrl.parse(url, "key store");
    boolean fsync = parsed.popBool("fsync");
    parsed.rejectUnknown("key store");
    return new FileKeyStore(parsed.folder(), fsync);
  }

  /** The subject's data key, made on first use (or taken from whoever made it first). */
  DataKey dataKey(String tenant, String subject) throws IOException {
    List<String> at = List.of(tenant, subject);
    DataKey known = sealing.get(at);
    if (known == null) {
      known = findOrMake(tenant, subject);
      sealing.put(at, known);
    }
    return known;
  }

  private DataKey findOrMake(String tenant, String subject) throws IOException {
    String known = keyIdOf(tenant, subject);
    if (known != null) {
      byte[] secret = keyById(tenant, known);
      if (secret != null) {
        return new DataKey(known, secret);
      }
    }
    String keyId = "dk-" + HexFormat.of().formatHex(Sealing.randomBytes(16));
    byte[] secret = Sealing.newKey();
    String version = currentTenantKey(tenant);
    byte[] wrapped = Sealing.seal(tenantKey(tenant, version), secret, Sealing.associated(tenant, keyId));
    writeKeyFile(tenant, keyId, version, wrapped);
    Path subjectFile = subjectFile(tenant, subject);
    PrivateFiles.dir(subjectFile.getParent());
    try {
      PrivateFiles.createExclusive(subjectFile, keyId.getBytes(StandardCharsets.UTF_8), false);
    } catch (FileAlreadyExistsException exc) { // another process made this subject's key first
      Files.deleteIfExists(keyFile(tenant, keyId));
      String winner = keyIdOf(tenant, subject);
      byte[] found = winner == null ? null : keyById(tenant, winner);
      if (found == null) {
        throw exc;
      }
      return new DataKey(winner, found);
    }
    return new DataKey(keyId, secret);
  }

  private Path tenantData(String tenant) {
    return root.resolve("data").resolve(PathSegment.of(tenant));
  }

  private Path subjectFile(String tenant, String subject) {
    return tenantData(tenant).resolve("subjects").resolve(Sealing.sha256Hex(subject.getBytes(StandardCharsets.UTF_8)));
  }

  private Path keyFile(String tenant, String keyId) {
    return tenantData(tenant).resolve("keys").resolve(keyId + ".json");
  }

  String keyIdOf(String tenant, String subject) throws IOException {
    try {
      String text = Files.readString(subjectFile(tenant, subject), StandardCharsets.UTF_8).strip();
      return text.isEmpty() ? null : text;
    } catch (NoSuchFileException exc) {
      return null;
    }
  }

  /** The data key {@code keyId}, unwrapped; null once destroyed (or never made). */
  byte[] keyById(String tenant, String keyId) throws IOException {
    byte[] body;
    try {
      body = Files.readAllBytes(keyFile(tenant, keyId));
    } catch (NoSuchFileException exc) {
      return null;
    }
    JSONObject doc = JSON.parseObject(new String(body, StandardCharsets.UTF_8));
    String version = String.valueOf(doc.get("tenantKeyVersion"));
    byte[] wrapped = Base64.getDecoder().decode(doc.getString("wrapped"));
    try {
      return Sealing.unseal(tenantKey(tenant, version), wrapped, Sealing.associated(tenant, keyId));
    } catch (Sealing.Unsealable exc) {
      throw new IOException("data key " + keyId + " of tenant " + tenant + " does not unwrap: " + exc.getMessage(), exc);
    }
  }

  private void writeKeyFile(String tenant, String keyId, String version, byte[] wrapped) throws IOException {
    Path path = keyFile(tenant, keyId);
    PrivateFiles.dir(path.getParent());
    // json.dumps' spelling, so a key file reads the same whichever side wrote it
    String body = "{\"tenantKeyVersion\": \"" + version + "\", \"wrapped\": \""
        + Base64.getEncoder().encodeToString(wrapped) + "\"}";
    PrivateFiles.replace(path, body.getBytes(StandardCharsets.UTF_8), fsync);
  }

  // --- tenant keys (FileTenantKeyring) ------------------------------------------------------
  private Path tenantKeys(String tenant) throws IOException {
    return PrivateFiles.dir(tenants.resolve(PathSegment.of(tenant)));
  }

  private byte[] tenantKey(String tenant, String version) throws IOException {
    return Files.readAllBytes(tenantKeys(tenant).resolve(version + ".key"));
  }

  /** The highest-numbered tenant key; the first one made when there is none. */
  private String currentTenantKey(String tenant) throws IOException {
    List<Integer> versions = versions(tenant);
    return versions.isEmpty() ? makeTenantKey(tenant) : String.valueOf(versions.get(versions.size() - 1));
  }

  private List<Integer> versions(String tenant) throws IOException {
    List<Integer> out = new ArrayList<>();
    try (Stream<Path> files = Files.list(tenantKeys(tenant))) {
      files.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".key")).forEach(n -> {
        try {
          out.add(Integer.parseInt(n.substring(0, n.length() - 4)));
        } catch (NumberFormatException exc) {
          // not a tenant key
        }
      });
    }
    out.sort(null);
    return out;
  }

  private String makeTenantKey(String tenant) throws IOException {
    Path folder = tenantKeys(tenant);
    List<Integer> versions = versions(tenant);
    int version = (versions.isEmpty() ? 0 : versions.get(versions.size() - 1)) + 1;
    while (true) {
      try {
        PrivateFiles.createExclusive(folder.resolve(version + ".key"), Sealing.newKey(), true);
        PrivateFiles.syncDir(folder);
        return String.valueOf(version);
      } catch (FileAlreadyExistsException exc) { // another process made one at the same moment
        version++;
      }
    }
  }
}
