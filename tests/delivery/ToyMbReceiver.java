import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A push consumer that behaves on the wire as ToyMB's Java driver does (ToyMB-client's
 * SubscribeBeanPostProcessor and ReceiveMessageController): at every start it registers a fresh
 * id with its host address, it never unsubscribes, and it answers 500 for a push whose
 * forSubscriber it does not know.
 *
 * Usage: java ToyMbReceiver NODE_URL TOPIC GROUP PORT. Prints "REGISTERED id", then
 * "GOT entity" for each push it accepts.
 */
public class ToyMbReceiver {
    private static volatile String me;

    private static String field(String json, String name) {
        Matcher m = Pattern.compile("\"" + name + "\"\\s*:\\s*\"([^\"]*)\"").matcher(json);
        return m.find() ? m.group(1) : null;
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        String node = args[0], topic = args[1], group = args[2];
        int port = Integer.parseInt(args[3]);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
        server.createContext("/receivemessage", exchange -> {
            String body = new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            String forSubscriber = field(body, "forSubscriber");
            int status = 500;  // ToyMB's controller fails on an id it does not know
            if (me != null && me.equals(forSubscriber)) {
                synchronized (System.out) {
                    System.out.println("GOT " + field(body, "entity"));
                    System.out.flush();
                }
                status = 200;
            }
            exchange.sendResponseHeaders(status, -1);
            exchange.close();
        });
        server.setExecutor(Executors.newFixedThreadPool(4));
        server.start();
        String subscribe = String.format("{\"id\":null,\"topicName\":\"%s\",\"groupName\":\"%s\",\"type\":\"push\","
                + "\"ip\":\"127.0.0.1\",\"port\":%d,\"requestor\":null}", topic, group, port);
        HttpResponse<String> answer = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create(node + "/subscribe"))
                        .header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString(subscribe)).build(),
                HttpResponse.BodyHandlers.ofString());
        if (answer.statusCode() != 200) {
            System.out.println("REFUSED " + answer.statusCode() + " " + answer.body());
            System.exit(1);
        }
        me = answer.body();
        System.out.println("REGISTERED " + me);
        System.out.flush();
        Thread.currentThread().join();  // serve until killed, as a Spring Boot app does
    }
}
