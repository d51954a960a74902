package dev.runtrail.ai4j;

import java.security.SecureRandom;
import java.util.UUID;

/**
 * The eventIds of the events this adapter makes itself (ai4j's own events keep ai4j's): version 7
 * UUIDs (RFC 9562), Unix milliseconds then 74 random bits, as the Python publisher stamps them.
 * Stores index events by eventId; time-ordered IDs keep each write near the index's end instead of
 * scattered over it.
 */
final class EventIds {
  private static final SecureRandom RANDOM = new SecureRandom();

  private EventIds() {}

  static String next() {
    return at(System.currentTimeMillis(), RANDOM.nextLong(), RANDOM.nextLong());
  }

  /** The v7 UUID of {@code unixMillis} with the random bits taken from {@code a} and {@code b}. */
  static String at(long unixMillis, long a, long b) {
    long high = (unixMillis & 0xFFFF_FFFF_FFFFL) << 16 | 0x7000L | (a & 0x0FFFL);
    long low = (b & 0x3FFF_FFFF_FFFF_FFFFL) | 0x8000_0000_0000_0000L;
    return new UUID(high, low).toString();
  }
}
