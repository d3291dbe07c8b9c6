// The reference codec (io.nats.bridge:nats-jms-bridge-message:1.0.4) on the other side of the Python one.
//   java CodecProbe encode SEED COUNT   -> per message: "<frame hex> <canonical form>"
//   java CodecProbe decode              -> reads frame hex lines on stdin; per line: "<canonical form>"
// The canonical form is what tests/bridges_nats/test_codec_java.py compares; the generator makes only
// messages the reference encodes correctly (see nats_bridge/codec.py for the inputs it breaks).
import io.nats.bridge.messages.Message;
import io.nats.bridge.messages.MessageBuilder;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Random;

public class CodecProbe {
    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x & 0xff));
        return s.length() == 0 ? "-" : s.toString();
    }

    static byte[] unhex(String h) {
        if (h.equals("-")) return new byte[0];
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        return b;
    }

    static String value(Object v) {
        String t = v.getClass().getSimpleName();
        String s;
        if (v instanceof String) s = hex(((String) v).getBytes(StandardCharsets.UTF_8));
        else if (v instanceof Float) s = Integer.toHexString(Float.floatToIntBits((Float) v));
        else if (v instanceof Double) s = Long.toHexString(Double.doubleToLongBits((Double) v));
        else s = v.toString();
        return t + ":" + s;
    }

    static String canonical(Message m) {
        StringBuilder h = new StringBuilder();
        for (Map.Entry<String, Object> e : m.headers().entrySet()) {
            if (h.length() > 0) h.append(",");
            h.append(hex(e.getKey().getBytes(StandardCharsets.UTF_8))).append(":").append(value(e.getValue()));
        }
        String corr = m.correlationID();
        String type = m.type();
        return m.timestamp() + " " + m.expirationTime() + " " + m.deliveryTime() + " " + m.deliveryMode() + " "
            + m.priority() + " " + m.redelivered() + " "
            + (corr == null || corr.isEmpty() ? "-" : hex(corr.getBytes(StandardCharsets.UTF_8))) + " "
            + ("NO_TYPE".equals(type) ? "-" : hex(type.getBytes(StandardCharsets.UTF_8))) + " "
            + hex(m.getBodyBytes() == null ? new byte[0] : m.getBodyBytes()) + " "
            + (h.length() == 0 ? "-" : h.toString());
    }

    static final String ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/ ";

    static String ascii(Random r, int min, int max) {
        int n = min + r.nextInt(max - min + 1);
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < n; i++) s.append(ASCII.charAt(r.nextInt(ASCII.length())));
        return s.toString();
    }

    // Strings the reference writes correctly: ASCII, 1..127 or 512..3000 characters.
    static String refString(Random r) {
        return r.nextInt(5) == 0 ? ascii(r, 512, 3000) : ascii(r, 1, 127);
    }

    static Message generate(Random r, int i) {
        MessageBuilder b = MessageBuilder.builder();
        byte[] body = new byte[r.nextInt(4) == 0 ? 0 : r.nextInt(300)];
        r.nextBytes(body);
        if (body.length > 0 && body[0] == (byte) 0xAB) body[0] = 1;  // a raw 0xAB 0xCD... would look like a frame
        b.withBody(body);
        if (i % 7 == 0) return b.build();   // no headers: the reference sends the raw body
        if (r.nextBoolean()) b.withCorrelationID(ascii(r, 1, 100));
        if (r.nextBoolean()) b.withTimestamp(1 + (r.nextLong() & Long.MAX_VALUE) % 4_000_000_000_000L);
        if (r.nextInt(3) == 0) b.withExpirationTime(1 + r.nextInt(Integer.MAX_VALUE));
        if (r.nextInt(3) == 0) b.withDeliveryTime(1 + r.nextInt(Integer.MAX_VALUE));
        if (r.nextBoolean()) b.withDeliveryMode(1 + r.nextInt(2));
        if (r.nextBoolean()) b.withPriority(r.nextInt(10));
        if (r.nextInt(3) == 0) b.withType(ascii(r, 1, 60));
        if (r.nextInt(4) == 0) b.withRedelivered(true);
        int n = r.nextInt(r.nextInt(10) == 0 ? 100 : 12);
        String[] shortcuts = {"ENV", "H1", "H2", "H3", "H4", "ENVIRONMENT"};
        for (int k = 0; k < n; k++) {
            String name = r.nextInt(6) == 0 ? shortcuts[r.nextInt(shortcuts.length)] : ascii(r, 1, 40) + k;
            switch (r.nextInt(9)) {
                case 0: b.withHeader(name, refString(r)); break;
                case 1: b.withHeader(name, r.nextBoolean()); break;
                case 2: b.withHeader(name, (byte) r.nextInt(256)); break;
                case 3: b.withHeader(name, (short) r.nextInt(65536)); break;
                case 4: {
                    int v = r.nextBoolean() ? r.nextInt() : r.nextInt(300) - 109;   // -127..-110 break the reference
                    b.withHeader(name, v < -109 && v > -128 ? v - 1000 : v);
                    break;
                }
                case 5: b.withHeader(name, r.nextLong()); break;
                case 6: b.withHeader(name, Float.intBitsToFloat(r.nextInt())); break;
                case 7: b.withHeader(name, Double.longBitsToDouble(r.nextLong())); break;
                default: b.withHeader(name, ascii(r, 1, 20)); break;
            }
        }
        return b.build();
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("encode")) {
            Random r = new Random(Long.parseLong(args[1]));
            int count = Integer.parseInt(args[2]);
            StringBuilder out = new StringBuilder();
            for (int i = 0; i < count; i++) {
                Message m = generate(r, i);
                out.append(hex(m.getMessageBytes())).append(" ").append(canonical(m)).append("\n");
            }
            System.out.print(out);
        } else {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
            String line;
            StringBuilder out = new StringBuilder();
            while ((line = in.readLine()) != null) {
                out.append(canonical(MessageBuilder.builder().buildFromBytes(unhex(line.trim())))).append("\n");
            }
            System.out.print(out);
        }
    }
}
