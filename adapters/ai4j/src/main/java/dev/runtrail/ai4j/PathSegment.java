package dev.runtrail.ai4j;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * A tenant ID as one path segment, exactly as {@code runtrail.sessions.naming.segment} spells
 * it (Python's {@code quote(id, safe="")}; a leading dot escaped; a long ID as {@code ~} and its
 * sha256), so the content and key stores name the same folders whichever language wrote them.
 */
final class PathSegment {
  static final int MAX_SEGMENT = 200;
  private static final String HEX = "0123456789ABCDEF";

  private PathSegment() {}

  static String of(String identifier) {
    if (identifier == null || identifier.isEmpty()) {
      throw new IllegalArgumentException("an empty ID cannot name a path segment");
    }
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (byte b : identifier.getBytes(StandardCharsets.UTF_8)) {
      int c = b & 0xff;
      if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
          || c == '_' || c == '.' || c == '-' || c == '~') {
        out.write(c);
      } else {
        out.write('%');
        out.write(HEX.charAt(c >> 4));
        out.write(HEX.charAt(c & 0xf));
      }
    }
    String encoded = out.toString(StandardCharsets.US_ASCII);
    if (encoded.startsWith(".")) { // never ".", "..", nor a hidden file
      encoded = "%2E" + encoded.substring(1);
    }
    if (encoded.length() > MAX_SEGMENT) {
      return "~" + Sealing.sha256Hex(identifier.getBytes(StandardCharsets.UTF_8));
    }
    return encoded;
  }
}
