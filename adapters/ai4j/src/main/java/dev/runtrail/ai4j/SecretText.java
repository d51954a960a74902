package dev.runtrail.ai4j;

import java.util.Base64;
import java.util.Locale;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Secret-shaped text inside strings, ported pattern for pattern from
 * {@code runtrail.publisher.secret_text}: provider keys and tokens, JWTs, PEM private keys,
 * Bearer/Basic credentials, DSN passwords, header lines and {@code key=value} pairs of a secret
 * key name. Each pattern masks only the secret part. Java's regex runs with Unicode character
 * classes, as Python's {@code re} does on text.
 */
final class SecretText {
  private SecretText() {}

  static final String REDACTED = "[REDACTED]";
  private static final int U = Pattern.UNICODE_CHARACTER_CLASS;

  private static final Pattern PEM =
      Pattern.compile("-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \\1PRIVATE KEY-----|\\z)", Pattern.DOTALL | U);
  private static final Pattern BEARER = Pattern.compile("\\b(Bearer)\\s+[A-Za-z0-9\\-._~+/]+=*", Pattern.CASE_INSENSITIVE | U);
  private static final Pattern BASIC =
      Pattern.compile("\\b(Basic)\\s+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])", Pattern.CASE_INSENSITIVE | U);
  private static final Pattern SK_KEY = Pattern.compile("(?<![A-Za-z0-9])sk-[A-Za-z0-9_\\-]{16,}", U);
  private static final Pattern AWS_KEY_ID = Pattern.compile("(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])", U);
  private static final Pattern GITHUB =
      Pattern.compile("(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})", U);
  private static final Pattern SLACK = Pattern.compile("(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}", U);
  private static final Pattern JWT =
      Pattern.compile("(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\\.eyJ[A-Za-z0-9_-]{4,}\\.[A-Za-z0-9_-]*", U);
  private static final Pattern DSN =
      Pattern.compile("(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^\\s:/@?#\"']*:)([^\\s@/?#\"']+)@", U);
  private static final Pattern SEP_VALUE =
      Pattern.compile(
          "(?<sep>\\\\*[\"']?\\s*[:=]\\s*)"
              + "(?<value>\"(?:[^\"\\\\]|\\\\.)*\"|(?<esc>\\\\+)\"(?:(?!\\\\+\").)*\\\\+\"|'[^']*'"
              + "|[^\\s,;&\"'<>{}\\[\\]\\\\]+)",
          U);
  private static final String[] NAME_STEMS = {
    "passw", "passphrase", "pwd", "secret", "token", "cookie", "auth", "credential", "key",
  };
  private static final Pattern HEADER_LINE =
      Pattern.compile(
          "(?im)(?<![\\w-])(?<name>(?:set-)?cookie|(?:proxy-)?authorization)(?<sep>\\s*:[ \\t]*)"
              + "(?<value>[^\\r\\n\"']*)",
          U);
  private static final Set<String> LINE_VALUED = Set.of("cookie", "set-cookie", "authorization", "proxy-authorization");
  private static final Pattern SCHEME = Pattern.compile("[A-Za-z][\\w-]*[ \\t]+(?=\\S)", U);

  private static String sub(Pattern pattern, String text, Function<Matcher, String> replacement) {
    Matcher m = pattern.matcher(text);
    StringBuilder out = null;
    int pos = 0;
    while (m.find()) {
      if (out == null) {
        out = new StringBuilder(text.length());
      }
      out.append(text, pos, m.start()).append(replacement.apply(m));
      pos = m.end();
    }
    if (out == null) {
      return text;
    }
    return out.append(text, pos, text.length()).toString();
  }

  private static String basic(Matcher m) {
    String encoded = m.group(2);
    if (encoded.length() % 4 != 0) {
      return m.group(0); // Python's b64decode(validate=True): incorrect padding
    }
    byte[] decoded;
    try {
      decoded = Base64.getDecoder().decode(encoded);
    } catch (IllegalArgumentException exc) {
      return m.group(0);
    }
    for (byte b : decoded) {
      if (b == ':') {
        return m.group(1) + " " + REDACTED;
      }
    }
    return m.group(0);
  }

  private static String maskedValue(String name, Matcher m) {
    String sep = m.group("sep");
    String value = m.group("value");
    if (!SecretKeys.isSensitiveKey(name) || value.contains(REDACTED)) {
      return null;
    }
    if (value.startsWith("\"")) {
      return "\"" + REDACTED + "\"";
    }
    if (m.group("esc") != null) {
      String quote = m.group("esc") + "\"";
      return quote + REDACTED + quote;
    }
    if (value.startsWith("'")) {
      return "'" + REDACTED + "'";
    }
    if (sep.contains(":") && LINE_VALUED.contains(name.toLowerCase(Locale.ROOT))) {
      return null;
    }
    char lastChar = value.charAt(value.length() - 1);
    if (lastChar == ':' || lastChar == '=') {
      return null;
    }
    return REDACTED;
  }

  private static boolean isNameChar(char c) {
    return Character.isLetterOrDigit(c) || c == '_' || c == '.' || c == '-';
  }

  private static TreeSet<long[]> candidateNames(String text, String low) {
    TreeSet<long[]> spans = new TreeSet<>((a, b) -> a[0] != b[0] ? Long.compare(a[0], b[0]) : Long.compare(a[1], b[1]));
    for (String stem : NAME_STEMS) {
      int at = low.indexOf(stem);
      while (at >= 0) {
        int start = at;
        int end = at + stem.length();
        while (start > 0 && start - 1 < text.length() && isNameChar(text.charAt(start - 1))) {
          start--;
        }
        while (end < text.length() && isNameChar(text.charAt(end))) {
          end++;
        }
        if (start < text.length() && (Character.isLetter(text.charAt(start)) || text.charAt(start) == '_')) {
          spans.add(new long[] {start, end});
        }
        at = low.indexOf(stem, end);
      }
    }
    return spans;
  }

  private static String maskPairs(String text, String low) {
    StringBuilder out = null;
    int pos = 0;
    Matcher m = SEP_VALUE.matcher(text);
    for (long[] span : candidateNames(text, low)) {
      int start = (int) span[0];
      int end = (int) span[1];
      if (start < pos || end > text.length()) {
        continue;
      }
      m.region(end, text.length());
      if (!m.lookingAt()) {
        continue;
      }
      String masked = maskedValue(text.substring(start, end), m);
      if (masked == null) {
        continue;
      }
      if (out == null) {
        out = new StringBuilder(text.length());
      }
      out.append(text, pos, m.start("value")).append(masked);
      pos = m.end();
    }
    if (out == null) {
      return text;
    }
    return out.append(text, pos, text.length()).toString();
  }

  private static String headerLine(Matcher m) {
    String value = m.group("value");
    if (value.isBlank() || value.contains(REDACTED)) {
      return m.group(0);
    }
    String head = m.group("name") + m.group("sep");
    String scheme = "";
    if (m.group("name").toLowerCase(Locale.ROOT).endsWith("authorization")) {
      Matcher s = SCHEME.matcher(value);
      if (s.lookingAt()) {
        scheme = s.group(0);
      }
    }
    return head + scheme + REDACTED;
  }

  private static final String[][] TOKEN_MARKERS = {{"sk-"}, {"AKIA", "ASIA"}, {"gh", "github_pat_"}, {"xox"}, {"eyJ"}};
  private static final Pattern[] TOKEN_PATTERNS = {SK_KEY, AWS_KEY_ID, GITHUB, SLACK, JWT};

  /** {@code text} with every secret-shaped part masked (JSON text is handled by the caller). */
  static String maskText(String text) {
    String low = text.toLowerCase(Locale.ROOT);
    if (text.contains("-----BEGIN")) {
      text = sub(PEM, text, m -> REDACTED);
    }
    if (low.contains("cookie") || low.contains("authorization")) {
      text = sub(HEADER_LINE, text, SecretText::headerLine);
    }
    if (low.contains("bearer")) {
      text = sub(BEARER, text, m -> m.group(1) + " " + REDACTED);
    }
    if (low.contains("basic")) {
      text = sub(BASIC, text, SecretText::basic);
    }
    if (text.contains("://")) {
      text = sub(DSN, text, m -> m.group(1) + REDACTED + "@");
    }
    for (String stem : NAME_STEMS) {
      if (low.contains(stem)) {
        text = maskPairs(text, text.toLowerCase(Locale.ROOT));
        break;
      }
    }
    for (int i = 0; i < TOKEN_PATTERNS.length; i++) {
      for (String marker : TOKEN_MARKERS[i]) {
        if (text.contains(marker)) {
          text = sub(TOKEN_PATTERNS[i], text, m -> REDACTED);
          break;
        }
      }
    }
    return text;
  }
}
