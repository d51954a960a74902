package dev.runtrail.ai4j;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.HexFormat;
import javax.crypto.Cipher;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;

/**
 * AES-256-GCM sealing, the JDK twin of {@code runtrail.privacy.sealing}: a sealed blob is
 * {@code RTC1 | nonce (12) | ciphertext+tag (16)}, bound by its associated data to its place
 * (tenant, key ID), so the Python readers open what Java sealed and the reverse.
 */
final class Sealing {
  static final byte[] MAGIC = "RTC1".getBytes(StandardCharsets.US_ASCII);
  static final int NONCE_BYTES = 12;
  static final int KEY_BYTES = 32;
  private static final int TAG_BITS = 128;
  private static final SecureRandom RANDOM = new SecureRandom();

  /** The blob is not one this key sealed for this place. */
  static final class Unsealable extends Exception {
    Unsealable(String message, Throwable cause) {
      super(message, cause);
    }
  }

  private Sealing() {}

  static byte[] randomBytes(int n) {
    byte[] out = new byte[n];
    RANDOM.nextBytes(out);
    return out;
  }

  static byte[] newKey() {
    return randomBytes(KEY_BYTES);
  }

  /** What a sealed blob (content or data key) is bound to: {@code runtrail\0tenant\0keyId}. */
  static byte[] associated(String tenant, String keyId) {
    return ("runtrail\0" + tenant + "\0" + keyId).getBytes(StandardCharsets.UTF_8);
  }

  static byte[] seal(byte[] key, byte[] plaintext, byte[] associated) {
    byte[] nonce = randomBytes(NONCE_BYTES);
    try {
      Cipher cipher = cipher(Cipher.ENCRYPT_MODE, key, nonce, associated);
      ByteBuffer out = ByteBuffer.allocate(MAGIC.length + NONCE_BYTES + cipher.getOutputSize(plaintext.length));
      out.put(MAGIC).put(nonce);
      cipher.doFinal(ByteBuffer.wrap(plaintext), out);
      return out.array().length == out.position() ? out.array() : Arrays.copyOf(out.array(), out.position());
    } catch (GeneralSecurityException exc) {
      throw new IllegalStateException("AES-GCM is not available: " + exc, exc);
    }
  }

  static byte[] unseal(byte[] key, byte[] blob, byte[] associated) throws Unsealable {
    int head = MAGIC.length + NONCE_BYTES;
    if (blob.length < head + TAG_BITS / 8 || !Arrays.equals(blob, 0, MAGIC.length, MAGIC, 0, MAGIC.length)) {
      throw new Unsealable("not a sealed blob", null);
    }
    try {
      Cipher cipher = cipher(Cipher.DECRYPT_MODE, key, Arrays.copyOfRange(blob, MAGIC.length, head), associated);
      return cipher.doFinal(blob, head, blob.length - head);
    } catch (GeneralSecurityException exc) {
      throw new Unsealable("the blob does not open with this key here", exc);
    }
  }

  private static Cipher cipher(int mode, byte[] key, byte[] nonce, byte[] associated) throws GeneralSecurityException {
    Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
    cipher.init(mode, new SecretKeySpec(key, "AES"), new GCMParameterSpec(TAG_BITS, nonce));
    cipher.updateAAD(associated);
    return cipher;
  }

  static String sha256Hex(byte[] data) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
    } catch (NoSuchAlgorithmException exc) {
      throw new IllegalStateException("SHA-256 is not available", exc);
    }
  }
}
