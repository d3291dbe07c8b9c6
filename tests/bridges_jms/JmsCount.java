// Counts a queue with a real JMS consumer (ActiveMQ's OpenWire client, Debian's jars):
//   java -cp <jars> JmsCount.java <broker-url> <queue> <expected> <idle-ms>
// Receives until <expected> messages came and then <idle-ms> passed without one (a duplicate would
// arrive then), or 120 s passed without any. Prints RECEIVED <n>, DISTINCT <d>, and MISSING or
// DUPLICATE lines naming the first few "seq" properties at fault.
import java.util.HashMap;
import java.util.Map;
import javax.jms.*;
import org.apache.activemq.ActiveMQConnectionFactory;

public class JmsCount {
    public static void main(String[] args) throws Exception {
        int expected = Integer.parseInt(args[2]);
        long idle = Long.parseLong(args[3]);
        Connection connection = new ActiveMQConnectionFactory(args[0]).createConnection();
        connection.start();
        Map<String, Integer> seen = new HashMap<>();
        int received = 0;
        try {
            Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer consumer = session.createConsumer(session.createQueue(args[1]));
            while (true) {
                Message m = consumer.receive(received >= expected ? idle : 120000);
                if (m == null) break;
                received++;
                seen.merge(m.getStringProperty("seq"), 1, Integer::sum);
            }
        } finally {
            connection.close();
        }
        System.out.println("RECEIVED " + received);
        System.out.println("DISTINCT " + seen.size());
        int shown = 0;
        for (Map.Entry<String, Integer> e : seen.entrySet()) {
            if (e.getValue() > 1 && shown++ < 10) System.out.println("DUPLICATE " + e.getKey() + " " + e.getValue());
        }
        shown = 0;
        for (int i = 0; i < expected && shown < 10; i++) {
            if (!seen.containsKey(Integer.toString(i))) { System.out.println("MISSING " + i); shown++; }
        }
    }
}
