package dev.runtrail.ai4j;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * The redactor's prefilter, ported from {@code runtrail.publisher.secret_markers}: could this
 * text hold anything the redactor would mask? It must never say "no" where the walk would
 * change something; it exists because nearly every event holds no secret.
 */
final class SecretMarkers {
  private SecretMarkers() {}

  private static final String[] CASED = {"AKIA", "ASIA", "eyJ"};
  private static final String[] PLAIN = {"passw", "passphrase", "bearer", "basic", "-----begin", "sk-", "xox", "\\u"};
  private static final String[] GITHUB = {"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"};
  private static final String[] STEMS = {"pwd", "secret", "token", "cookie", "auth", "credential", "key"};
  private static final Map<String, List<String>> SUFFIXES_BY_STEM = new LinkedHashMap<>();
  private static final String[] QUALIFIERS = new TreeSet<>(SecretKeys.KEY_QUALIFIERS).toArray(new String[0]);
  private static final Pattern DSN = Pattern.compile("://[^\\s/@\"]*:[^\\s/@\"]*@", Pattern.UNICODE_CHARACTER_CLASS);

  static {
    for (int i = 0; i < STEMS.length; i++) {
      List<String> mine = new ArrayList<>();
      for (String suffix : SecretKeys.SECRET_SUFFIXES) {
        boolean earlier = false;
        for (int j = 0; j < i; j++) {
          earlier |= suffix.contains(STEMS[j]);
        }
        if (suffix.contains(STEMS[i]) && !earlier) {
          mine.add(suffix);
        }
      }
      SUFFIXES_BY_STEM.put(STEMS[i], mine);
    }
  }

  private static boolean isLowerAscii(char c) {
    return c >= 'a' && c <= 'z';
  }

  private static boolean endsWordSomewhere(String low, String word) {
    int at = low.indexOf(word);
    while (at >= 0) {
      int end = at + word.length();
      if (end == low.length() || !isLowerAscii(low.charAt(end))) {
        return true;
      }
      at = low.indexOf(word, end);
    }
    return false;
  }

  private static boolean qualifiedKeySomewhere(String low) {
    int at = low.indexOf("key");
    while (at >= 0) {
      int end = at + 3;
      if (end == low.length() || !isLowerAscii(low.charAt(end))) {
        int before = at;
        while (before > 0 && "-_. ".indexOf(low.charAt(before - 1)) >= 0) {
          before--;
        }
        String head = low.substring(0, before);
        for (String q : QUALIFIERS) {
          if (head.endsWith(q)) {
            return true;
          }
        }
      }
      at = low.indexOf("key", end);
    }
    return false;
  }

  static boolean hasMarker(String text) {
    for (String m : CASED) {
      if (text.contains(m)) {
        return true;
      }
    }
    String low = text.toLowerCase(Locale.ROOT);
    for (String m : PLAIN) {
      if (low.contains(m)) {
        return true;
      }
    }
    if (low.contains("gh")) {
      for (String m : GITHUB) {
        if (low.contains(m)) {
          return true;
        }
      }
    }
    if (low.contains("://") && DSN.matcher(low).find()) {
      return true;
    }
    for (String stem : STEMS) {
      if (low.contains(stem)) {
        for (String suffix : SUFFIXES_BY_STEM.get(stem)) {
          if (endsWordSomewhere(low, suffix)) {
            return true;
          }
        }
        if (stem.equals("key") && qualifiedKeySomewhere(low)) {
          return true;
        }
      }
    }
    return false;
  }
}
